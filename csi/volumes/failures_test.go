package volumes_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"go.uber.org/mock/gomock"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/csitest"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/supervisor"
)

// TestAHangingNodeStageIsAnsweredAtTheDeadlineAndRolledBack has the
// plugin never answer NodeStageVolume: the caller is answered at the
// operation deadline, the mount rolls back (unstage, release the claim)
// without the caller, and the status shows the outcome.
func TestAHangingNodeStageIsAnsweredAtTheDeadlineAndRolledBack(t *testing.T) {
	n := newNode(t, func(c *volumes.Config) { c.OperationTimeout = 500 * time.Millisecond })
	n.catalog.add("vol", "vol", "mock", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem)
	m := newMockPlugin(t, n, true, false)
	gomock.InOrder(
		m.nodeCaps(), m.controllerCaps(),
		m.Node.EXPECT().NodeStageVolume(gomock.Any(), gomock.Any()).DoAndReturn(
			func(ctx context.Context, _ *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
				<-ctx.Done() // never answers; ends when the caller gives up
				return nil, status.Error(codes.DeadlineExceeded, "hung")
			}),
		m.Node.EXPECT().NodeUnstageVolume(gomock.Any(), gomock.Any()).Return(&csipb.NodeUnstageVolumeResponse{}, nil),
	)
	_, err := n.manager.Mount(ctx, "", "vol", "web-1", false)
	require.Error(t, err)
	require.True(t, errors.Is(err, volumes.ErrDeadline) || errors.Is(err, csi.ErrDeadlineExceeded), "got %v", err)

	st := n.settle("vol")
	require.Equal(t, "mount web-1", st.LastOperation)
	require.Contains(t, st.LastError, "deadline exceeded")
	require.Nil(t, st.Record, "the mount rolled back: nothing is left on the node")
	n.requireNoWriter("vol", "the claim the mount made is released")
}

// TestADetachThatFailsKeepsTheClaimUntilTheGCStepDetachesWithTheStoredNodeID
// mounts through a controller that attaches, removes the node plugin from
// the registry, and unmounts: the node plugin's recorded socket serves the
// unpublish, the detach fails once, the claim stays (as a past claim, with
// its writer slot), and the GC step retries on the fake clock with the
// stored node ID until the claim is freed.
func TestADetachThatFailsKeepsTheClaimUntilTheGCStepDetachesWithTheStoredNodeID(t *testing.T) {
	clock := fakeClock()
	n := newNode(t, func(c *volumes.Config) {
		c.Clock = clock
		c.Retry = supervisor.Spec{MaxRestarts: 10, Within: time.Hour, InitialDelay: time.Second, MaxDelay: time.Second, Multiplier: 1}
	})
	n.catalog.add("vol", "ext", "p", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem)
	ctrl := &mockPlugin{Mocks: namedMocks(t), socket: socketPath(t, "ctrl"), attach: true}
	ctrl.Serve(t, ctrl.socket)
	node := &mockPlugin{Mocks: namedMocks(t), socket: socketPath(t, "node"), stage: true}
	node.Serve(t, node.socket)
	n.register(volumes.ControllerPluginType, "p", "c1", ctrl.socket)
	n.register(volumes.NodePluginType, "p", "n1", node.socket)

	unpublish := func(code codes.Code) *gomock.Call {
		call := ctrl.Controller.EXPECT().ControllerUnpublishVolume(gomock.Any(), csitest.ProtoEq(&csipb.ControllerUnpublishVolumeRequest{
			VolumeId: "ext", NodeId: "plugin-node-7", Secrets: volumeSecrets}))
		if code != codes.OK {
			return call.Return(nil, status.Error(code, "controller is down"))
		}
		return call.Return(&csipb.ControllerUnpublishVolumeResponse{}, nil)
	}
	gomock.InOrder(
		node.nodeCaps(), ctrl.controllerCaps(),
		node.Node.EXPECT().NodeGetInfo(gomock.Any(), gomock.Any()).Return(&csipb.NodeGetInfoResponse{NodeId: "plugin-node-7"}, nil).Times(1),
		ctrl.Controller.EXPECT().ControllerPublishVolume(gomock.Any(), gomock.Any()).Return(&csipb.ControllerPublishVolumeResponse{}, nil),
		node.Node.EXPECT().NodeStageVolume(gomock.Any(), gomock.Any()).Return(&csipb.NodeStageVolumeResponse{}, nil),
		node.Node.EXPECT().NodePublishVolume(gomock.Any(), gomock.Any()).Return(&csipb.NodePublishVolumeResponse{}, nil),
		node.Node.EXPECT().NodeUnpublishVolume(gomock.Any(), gomock.Any()).Return(&csipb.NodeUnpublishVolumeResponse{}, nil),
		node.Node.EXPECT().NodeUnstageVolume(gomock.Any(), gomock.Any()).Return(&csipb.NodeUnstageVolumeResponse{}, nil),
		unpublish(codes.Unavailable),
		unpublish(codes.OK),
	)
	_, err := n.manager.Mount(ctx, "", "vol", "web-1", false)
	require.NoError(t, err)
	require.NoError(t, n.registry.DeregisterPlugin(volumes.NodePluginType, "p", "n1"))

	err = n.manager.Unmount(ctx, "", "vol", "web-1")
	require.ErrorIs(t, err, csi.ErrUnavailable)
	writers, _, past := n.catalog.claims("vol")
	require.Equal(t, []string{"web-1"}, writers, "the writer slot stays held until the detach goes through")
	require.Equal(t, model.ClaimStateNodeDetached, past["web-1"], "the claim is a past claim with its state")
	rec := n.status("vol").Record
	require.Equal(t, "detaching", rec.GetAttachment().GetState())
	require.Contains(t, rec.GetAttachment().GetLastError(), "controller is down")
	_, err = n.manager.Mount(ctx, "", "vol", "web-2", false)
	require.ErrorIs(t, err, volumes.ErrInUse, "no new mount while the detach is unfinished")

	require.Eventually(t, func() bool { return clock.Pending() > 0 }, wait, time.Millisecond, "the GC step armed a retry")
	clock.Advance(time.Second)
	require.Eventually(t, func() bool {
		st := n.status("vol")
		return st.Record == nil && !st.Busy
	}, wait, 5*time.Millisecond, "the GC step detached the volume")
	writers, _, past = n.catalog.claims("vol")
	require.Empty(t, writers, "the claim is freed")
	require.Empty(t, past)
}

// TestBadRequestsAreRefusedAndChangeNothing sends requests that must be
// refused to a node with two mounts, and checks each error and that
// neither the record nor the claims changed.
func TestBadRequestsAreRefusedAndChangeNothing(t *testing.T) {
	n := newNode(t, nil)
	n.catalog.add("vol", "vol", "mock", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem)
	n.catalog.add("ghost", "ghost", "ghost-plugin", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem)
	n.catalog.add("bad-plugin", "bad-plugin", "..", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem)
	m := newMockPlugin(t, n, true, false)
	m.nodeCaps().AnyTimes()
	m.controllerCaps().AnyTimes()
	m.Node.EXPECT().NodeStageVolume(gomock.Any(), gomock.Any()).Return(&csipb.NodeStageVolumeResponse{}, nil)
	m.Node.EXPECT().NodePublishVolume(gomock.Any(), gomock.Any()).Return(&csipb.NodePublishVolumeResponse{}, nil).Times(2)
	_, err := n.manager.Mount(ctx, "", "vol", "writer", false)
	require.NoError(t, err)
	_, err = n.manager.Mount(ctx, "", "vol", "reader", true)
	require.NoError(t, err)
	before := n.status("vol").Record
	w0, r0, p0 := n.catalog.claims("vol")

	mount := func(ns, id, alloc string, ro bool) func() error {
		return func() error { _, err := n.manager.Mount(ctx, ns, id, alloc, ro); return err }
	}
	cases := []struct {
		name string
		call func() error
		want error
		says string
	}{
		{"a namespace with a path separator", mount("a/b", "vol", "x", false), volumes.ErrInvalid, "namespace"},
		{"a namespace of ..", mount("..", "vol", "x", false), volumes.ErrInvalid, "namespace"},
		{"an empty volume ID", mount("", "", "x", false), volumes.ErrInvalid, "volume ID must not be empty"},
		{"a volume ID of .", mount("", ".", "x", false), volumes.ErrInvalid, "volume ID"},
		{"an alloc ID with a separator", mount("", "vol", "a/b", false), volumes.ErrInvalid, "alloc ID"},
		{"an alloc ID with a control character", mount("", "vol", "a\x01", false), volumes.ErrInvalid, "alloc ID"},
		{"an empty alloc ID", mount("", "vol", "", false), volumes.ErrInvalid, "alloc ID must not be empty"},
		{"an unknown volume", mount("", "nope", "x", false), volumes.ErrVolumeNotFound, "nope"},
		{"a volume whose plugin is not registered", mount("", "ghost", "x", false), volumes.ErrPluginNotFound, "ghost-plugin"},
		{"a volume whose plugin ID cannot be a path", mount("", "bad-plugin", "x", false), volumes.ErrInvalid, "plugin ID"},
		{"a second writer", mount("", "vol", "writer-2", false), volumes.ErrClaimRefused, "writer"},
		{"a reader mounting again read-write", mount("", "vol", "reader", false), volumes.ErrInUse, "unmount it first"},
		{"an unmount of an alloc with no mount", func() error { return n.manager.Unmount(ctx, "", "vol", "stranger") }, volumes.ErrNotMounted, "stranger"},
		{"a release while published", func() error { return n.manager.Release(ctx, "", "vol", "writer") }, volumes.ErrInUse, "alloc writer"},
		{"a detach while published", func() error { return n.manager.Detach(ctx, "", "vol", "node-1") }, volumes.ErrInUse, "reader"},
		{"a detach without a node", func() error { return n.manager.Detach(ctx, "", "vol", "") }, volumes.ErrInvalid, "node ID"},
		{"a claim of an unknown volume", func() error { return n.manager.Claim(ctx, "", "nope", "x", false) }, volumes.ErrVolumeNotFound, "nope"},
		{"a release of an unknown volume", func() error { return n.manager.Release(ctx, "", "nope", "x") }, volumes.ErrVolumeNotFound, "nope"},
		{"a status of a bad ID", func() error { _, err := n.manager.Status(ctx, "", "a/b"); return err }, volumes.ErrInvalid, "volume ID"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			require.ErrorIs(t, err, c.want)
			require.Contains(t, err.Error(), c.says)
			require.True(t, proto.Equal(before, n.status("vol").Record), "the record did not change")
			w, r, p := n.catalog.claims("vol")
			require.Equal(t, [][]string{w0, r0}, [][]string{w, r}, "the claims did not change")
			require.Equal(t, p0, p)
		})
	}
	require.False(t, strings.Contains(before.String(), "s3cret"))
	n.stop()
}

// TestAVolumeWhosePluginWasGoneIsReconciledWhenThePluginRegisters has the
// node plugin vanish (deregistered, its socket gone) while a volume is
// published: the unmount fails and leaves the record; when a new
// allocation of the plugin registers at a new socket, the volume manager
// reconciles the volume at once (no GC timer fires: the fake clock stands
// still) and the unmount completes through the new socket.
func TestAVolumeWhosePluginWasGoneIsReconciledWhenThePluginRegisters(t *testing.T) {
	clock := fakeClock()
	n := newNode(t, func(c *volumes.Config) { c.Clock = clock; c.RPCTimeout = 500 * time.Millisecond })
	n.catalog.add("vol", "vol", "p", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem)
	old := &mockPlugin{Mocks: namedMocks(t), socket: socketPath(t, "old")}
	server := csitest.Serve(t, old.socket, old.Services())
	n.register(volumes.NodePluginType, "p", "a1", old.socket)
	old.nodeCaps()
	old.Controller.EXPECT().ControllerGetCapabilities(gomock.Any(), gomock.Any()).Return(&csipb.ControllerGetCapabilitiesResponse{}, nil)
	old.Node.EXPECT().NodePublishVolume(gomock.Any(), gomock.Any()).Return(&csipb.NodePublishVolumeResponse{}, nil)
	_, err := n.manager.Mount(ctx, "", "vol", "web-1", false)
	require.NoError(t, err)

	require.NoError(t, n.registry.DeregisterPlugin(volumes.NodePluginType, "p", "a1"))
	server.Stop()
	err = n.manager.Unmount(ctx, "", "vol", "web-1")
	require.ErrorIs(t, err, csi.ErrConnect)
	require.Equal(t, "unpublishing", n.status("vol").Record.GetPublishes()["web-1"].GetState())

	fresh := &mockPlugin{Mocks: namedMocks(t), socket: socketPath(t, "new")}
	fresh.Serve(t, fresh.socket)
	fresh.Node.EXPECT().NodeUnpublishVolume(gomock.Any(), gomock.Any()).Return(&csipb.NodeUnpublishVolumeResponse{}, nil)
	n.register(volumes.NodePluginType, "p", "a2", fresh.socket)
	require.Eventually(t, func() bool { return n.status("vol").Record == nil }, wait, 5*time.Millisecond,
		"the registration of the plugin reconciled the volume")
	n.requireNoWriter("vol")
}

// TestACallerThatGoesAwayDoesNotStopItsMount cancels the caller's context
// while NodePublishVolume is held: the caller gets its context's error at
// once, the mount goes on and completes, and the status says so.
func TestACallerThatGoesAwayDoesNotStopItsMount(t *testing.T) {
	n := newNode(t, nil)
	n.catalog.add("vol", "vol", "mock", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem)
	m := newMockPlugin(t, n, false, false)
	reached, release := make(chan struct{}), make(chan struct{})
	gomock.InOrder(
		m.nodeCaps(), m.controllerCaps(),
		m.Node.EXPECT().NodePublishVolume(gomock.Any(), gomock.Any()).DoAndReturn(
			func(context.Context, *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
				close(reached)
				<-release
				return &csipb.NodePublishVolumeResponse{}, nil
			}),
		m.nodeCaps().MinTimes(1), // each status of the published volume asks for stats
	)
	callerCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := n.manager.Mount(callerCtx, "", "vol", "web-1", false)
		done <- err
	}()
	<-reached
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	close(release)

	st := n.settle("vol")
	require.Equal(t, "mount web-1", st.LastOperation)
	require.Empty(t, st.LastError)
	require.Equal(t, "published", st.Record.GetPublishes()["web-1"].GetState(), "the mount went on without its caller")
	writers, _, _ := n.catalog.claims("vol")
	require.Equal(t, []string{"web-1"}, writers)
	n.stop()
}
