package volumes_test

import (
	"context"
	"path/filepath"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/mock/gomock"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/csitest"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/messages"
)

const expandCap = csipb.NodeServiceCapability_RPC_EXPAND_VOLUME

// expandFixture is a node with volume "vol" (plugin volume "ext-vol") of a
// mock plugin that stages and does not attach.
type expandFixture struct {
	n               *node
	m               *mockPlugin
	staging, target string
	capability      *csipb.VolumeCapability
	caps            []csipb.NodeServiceCapability_RPC_Type
}

func newExpandFixture(t *testing.T, caps ...csipb.NodeServiceCapability_RPC_Type) *expandFixture {
	n := newNode(t, nil)
	n.catalog.add("vol", "ext-vol", "mock", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem)
	f := &expandFixture{
		n: n, m: newMockPlugin(t, n, true, false),
		staging:    filepath.Join(n.root, "mock", "staging", "default", "vol"),
		target:     filepath.Join(n.root, "mock", "per-alloc", "web-1", "default", "vol"),
		capability: capabilityOf(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false),
		caps:       caps,
	}
	return f
}

// mountCalls expects the RPCs of the mount up to NodePublishVolume.
func (f *expandFixture) mountCalls() []any {
	return []any{
		f.m.nodeCapsWith(f.caps...), f.m.controllerCaps(),
		f.m.Node.EXPECT().NodeStageVolume(gomock.Any(), gomock.Any()).Return(&csipb.NodeStageVolumeResponse{}, nil),
	}
}

// publish expects the NodePublishVolume of the mount; do runs while it is
// being answered.
func (f *expandFixture) publish(do func()) *gomock.Call {
	return f.m.Node.EXPECT().NodePublishVolume(gomock.Any(), gomock.Any()).DoAndReturn(
		func(context.Context, *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
			if do != nil {
				do()
			}
			return &csipb.NodePublishVolumeResponse{}, nil
		})
}

func (f *expandFixture) nodeExpand(required int64) *gomock.Call {
	return f.m.Node.EXPECT().NodeExpandVolume(gomock.Any(), csitest.ProtoEq(&csipb.NodeExpandVolumeRequest{
		VolumeId: "ext-vol", VolumePath: f.target, CapacityRange: &csipb.CapacityRange{RequiredBytes: required},
		StagingTargetPath: f.staging, VolumeCapability: f.capability, Secrets: volumeSecrets,
	})).Return(&csipb.NodeExpandVolumeResponse{CapacityBytes: required}, nil)
}

// TestNodeExpansionSendsNodeExpandVolumeWhereTheVolumeIsPublished mounts a
// staged volume and expands it on the node: the plugin gets
// NodeGetCapabilities and then NodeExpandVolume with the target path, the
// staging path, the capability, the secrets and the capacity.
func TestNodeExpansionSendsNodeExpandVolumeWhereTheVolumeIsPublished(t *testing.T) {
	f := newExpandFixture(t, expandCap)
	gomock.InOrder(append(f.mountCalls(), f.publish(nil),
		f.m.nodeCapsWith(expandCap), f.nodeExpand(8<<20),
		f.m.nodeCapsWith(expandCap), // the status asks for stats; the plugin has none
		f.m.Node.EXPECT().NodeUnpublishVolume(gomock.Any(), gomock.Any()).Return(&csipb.NodeUnpublishVolumeResponse{}, nil),
		f.m.Node.EXPECT().NodeUnstageVolume(gomock.Any(), gomock.Any()).Return(&csipb.NodeUnstageVolumeResponse{}, nil),
	)...)
	_, err := f.n.manager.Mount(ctx, "", "vol", "web-1", false)
	require.NoError(t, err)
	res, err := f.n.manager.NodeExpand(ctx, "", "vol", 8<<20)
	require.NoError(t, err)
	require.Equal(t, volumes.NodeExpandResult{Expanded: true, CapacityBytes: 8 << 20, VolumePath: f.target}, res)
	st := f.n.settle("vol")
	require.Equal(t, "node expand", st.LastOperation)
	require.Empty(t, st.LastError)
	require.NoError(t, f.n.manager.Unmount(ctx, "", "vol", "web-1"))
}

// TestNodeExpansionWaitsForTheMountInTheVolumesQueue asks for a node
// expansion while the mount is in NodePublishVolume (a status answered
// after the request proves the manager queued it): it runs after the
// mount, and finds the volume published.
func TestNodeExpansionWaitsForTheMountInTheVolumesQueue(t *testing.T) {
	f := newExpandFixture(t, expandCap)
	p := probe.New(t, f.n.system)
	gomock.InOrder(append(f.mountCalls(),
		f.publish(func() {
			p.Send(f.n.manager.PID(), &messages.NodeExpandAllocVolume{Namespace: "default", VolumeId: "vol", CapacityBytes: 4 << 20, ReplyTo: p.PID()})
			p.Send(f.n.manager.PID(), &messages.VolumeStatusRequest{Namespace: "default", VolumeId: "vol", ReplyTo: p.PID()})
			st := probe.Expect[*messages.VolumeStatusResponse](t, p, wait)
			assert.True(t, st.GetBusy(), "the mount still runs while the expansion waits")
		}),
		f.m.nodeCapsWith(expandCap), f.nodeExpand(4<<20),
	)...)
	_, err := f.n.manager.Mount(ctx, "", "vol", "web-1", false)
	require.NoError(t, err)
	resp := probe.Expect[*messages.NodeExpandAllocVolumeResponse](t, p, wait)
	require.Nil(t, resp.GetError())
	require.True(t, resp.GetExpanded(), "the expansion ran after the mount had published the volume")
	f.n.stop() // the volume stays published; the mocks expect nothing more
}

// TestNodeExpansionOfAVolumeNotPublishedHereWaitsForItsNextMount expands
// a volume this node does not publish: no RPC, an answer that says the
// expansion waits, and a durable pending expansion that survives a
// restart and is sent right after the next mount's NodePublishVolume,
// which clears it.
func TestNodeExpansionOfAVolumeNotPublishedHereWaitsForItsNextMount(t *testing.T) {
	f := newExpandFixture(t, expandCap)
	res, err := f.n.manager.NodeExpand(ctx, "", "vol", 4<<20)
	require.NoError(t, err)
	require.False(t, res.Expanded)
	require.Contains(t, res.Note, "NodeExpandVolume is sent at its next mount here")
	expanded, err := f.n.manager.ExpandOnNodes(ctx, &model.CSIVolume{Namespace: "default", ID: "vol"}, 8<<20)
	require.NoError(t, err)
	require.False(t, expanded)

	f.n.restart()
	st := f.n.settle("vol")
	require.Equal(t, int64(8<<20), st.Record.GetPendingExpandBytes(), "the larger expansion is pending, durably")
	require.Empty(t, st.Record.GetPublishes())

	gomock.InOrder(append(f.mountCalls(), f.publish(nil), f.m.nodeCapsWith(expandCap), f.nodeExpand(8<<20),
		f.m.nodeCapsWith(expandCap).AnyTimes(), // the status asks for stats; the plugin has none
	)...)
	_, err = f.n.manager.Mount(ctx, "", "vol", "web-1", false)
	require.NoError(t, err)
	st = f.n.settle("vol")
	require.Zero(t, st.Record.GetPendingExpandBytes(), "the mount finished the expansion")
	require.Empty(t, st.Record.GetPendingExpandError())
	f.n.stop() // the volume stays published; the mocks expect nothing more
}

// TestAPendingNodeExpansionThatFailsLeavesTheMountUpAndStaysPending
// mounts a volume whose node expansion is pending, with a node plugin that
// refuses NodeExpandVolume: the mount succeeds, and the expansion stays
// pending with the plugin's error.
func TestAPendingNodeExpansionThatFailsLeavesTheMountUpAndStaysPending(t *testing.T) {
	f := newExpandFixture(t, expandCap)
	_, err := f.n.manager.NodeExpand(ctx, "", "vol", 4<<20)
	require.NoError(t, err)
	gomock.InOrder(append(f.mountCalls(), f.publish(nil), f.m.nodeCapsWith(expandCap),
		f.m.Node.EXPECT().NodeExpandVolume(gomock.Any(), gomock.Any()).Return(nil, status.Error(codes.Internal, "resize2fs failed")),
		f.m.nodeCapsWith(expandCap).AnyTimes(), // the status asks for stats; the plugin has none
	)...)

	res, err := f.n.manager.Mount(ctx, "", "vol", "web-1", false)
	require.NoError(t, err)
	require.Equal(t, f.target, res.TargetPath)
	st := f.n.settle("vol")
	require.Equal(t, "published", st.Record.GetPublishes()["web-1"].GetState())
	require.Equal(t, int64(4<<20), st.Record.GetPendingExpandBytes())
	require.Contains(t, st.Record.GetPendingExpandError(), "resize2fs failed")
	f.n.stop()
}

// TestNodeExpansionByAPluginWithoutExpandVolumeIsRefused mounts with a
// plugin that does not advertise EXPAND_VOLUME: the expansion is refused
// after NodeGetCapabilities, and sends no NodeExpandVolume.
func TestNodeExpansionByAPluginWithoutExpandVolumeIsRefused(t *testing.T) {
	f := newExpandFixture(t)
	gomock.InOrder(append(f.mountCalls(), f.publish(nil), f.m.nodeCaps())...)
	_, err := f.n.manager.Mount(ctx, "", "vol", "web-1", false)
	require.NoError(t, err)
	_, err = f.n.manager.NodeExpand(ctx, "", "vol", 4<<20)
	require.ErrorIs(t, err, csi.ErrUnimplemented)
	require.ErrorContains(t, err, "EXPAND_VOLUME")
	f.n.stop()
}

// TestNodeExpansionBadInputIsRefusedBeforeTheQueue checks the IDs and the
// capacity are checked at the facade.
func TestNodeExpansionBadInputIsRefusedBeforeTheQueue(t *testing.T) {
	f := newExpandFixture(t)
	for _, c := range []struct {
		name, id string
		capacity int64
		want     string
	}{
		{"a volume ID with a path separator", "a/b", 1, "volume ID"},
		{"an empty volume ID", "", 1, "volume ID"},
		{"a zero capacity", "vol", 0, "capacity bytes"},
		{"a negative capacity", "vol", -5, "capacity bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := f.n.manager.NodeExpand(ctx, "", c.id, c.capacity)
			require.ErrorIs(t, err, volumes.ErrInvalid)
			require.ErrorContains(t, err, c.want)
		})
	}
	require.Empty(t, f.n.status("vol").LastOperation, "nothing was queued")
}
