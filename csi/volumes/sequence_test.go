package volumes_test

import (
	"context"
	"path/filepath"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"go.uber.org/mock/gomock"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/csitest"
	"github.com/plugvisor/plugvisor/csi/volumes"
)

// mockPlugin is a gomock CSI plugin served on a unix socket, registered as
// the csi-node and csi-controller plugin "mock".
type mockPlugin struct {
	*csitest.Mocks
	socket string
	stage  bool
	attach bool
}

func newMockPlugin(t *testing.T, n *node, stage, attach bool) *mockPlugin {
	m := &mockPlugin{Mocks: namedMocks(t), socket: socketPath(t, "mock"), stage: stage, attach: attach}
	m.Serve(t, m.socket)
	n.register(volumes.NodePluginType, "mock", "a1", m.socket)
	n.register(volumes.ControllerPluginType, "mock", "a1", m.socket)
	return m
}

// mockPluginName is the CSI name (GetPluginInfo) every mock plugin answers.
const mockPluginName = "mock.csi.example.com"

// namedMocks are gomock CSI services whose Identity answers GetPluginInfo,
// with mockPluginName, as often as it is asked: the volume manager asks
// the name of each connection's plugin (the way out checks it).
func namedMocks(t *testing.T) *csitest.Mocks {
	m := csitest.NewMocks(t)
	m.Identity.EXPECT().GetPluginInfo(gomock.Any(), gomock.Any()).
		Return(&csipb.GetPluginInfoResponse{Name: mockPluginName, VendorVersion: "1"}, nil).AnyTimes()
	return m
}

func (m *mockPlugin) nodeCaps() *gomock.Call {
	return m.nodeCapsWith()
}

// nodeCapsWith expects NodeGetCapabilities and answers STAGE_UNSTAGE_VOLUME
// when the plugin stages, and extra.
func (m *mockPlugin) nodeCapsWith(extra ...csipb.NodeServiceCapability_RPC_Type) *gomock.Call {
	types := extra
	if m.stage {
		types = append([]csipb.NodeServiceCapability_RPC_Type{csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME}, extra...)
	}
	resp := &csipb.NodeGetCapabilitiesResponse{}
	for _, typ := range types {
		resp.Capabilities = append(resp.Capabilities, &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{
			Rpc: &csipb.NodeServiceCapability_RPC{Type: typ}}})
	}
	return m.Node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).Return(resp, nil)
}

func (m *mockPlugin) controllerCaps() *gomock.Call {
	resp := &csipb.ControllerGetCapabilitiesResponse{}
	if m.attach {
		resp.Capabilities = append(resp.Capabilities, &csipb.ControllerServiceCapability{Type: &csipb.ControllerServiceCapability_Rpc{
			Rpc: &csipb.ControllerServiceCapability_RPC{Type: csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME}}})
	}
	return m.Controller.EXPECT().ControllerGetCapabilities(gomock.Any(), gomock.Any()).Return(resp, nil)
}

var (
	volumeContext  = map[string]string{"k": "v"}
	volumeSecrets  = map[string]string{"password": "s3cret"}
	publishContext = map[string]string{"device": "/dev/mock0"}
)

func capabilityOf(access csipb.VolumeCapability_AccessMode_Mode, block bool) *csipb.VolumeCapability {
	c := &csipb.VolumeCapability{AccessMode: &csipb.VolumeCapability_AccessMode{Mode: access}}
	if block {
		c.AccessType = &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}
	} else {
		c.AccessType = &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}}
	}
	return c
}

// TestMountAndUnmountSendExactlyTheRPCsTheCapabilitiesCallFor mounts and
// unmounts one volume for each combination of the plugin's capabilities
// and the mount's kind, and checks every RPC the plugin receives, in
// order, with its exact request.
func TestMountAndUnmountSendExactlyTheRPCsTheCapabilitiesCallFor(t *testing.T) {
	for _, stage := range []bool{false, true} {
		for _, attach := range []bool{false, true} {
			for _, block := range []bool{false, true} {
				for _, readOnly := range []bool{false, true} {
					name := map[bool]string{false: "no stage", true: "stage"}[stage] + ", " +
						map[bool]string{false: "no attach", true: "attach"}[attach] + ", " +
						map[bool]string{false: "file system", true: "block device"}[block] + ", " +
						map[bool]string{false: "read-write", true: "read-only"}[readOnly]
					t.Run(name, func(t *testing.T) { exactSequence(t, stage, attach, block, readOnly) })
				}
			}
		}
	}
}

func exactSequence(t *testing.T, stage, attach, block, readOnly bool) {
	n := newNode(t, nil)
	attachment := model.AttachmentModeFileSystem
	if block {
		attachment = model.AttachmentModeBlockDevice
	}
	n.catalog.add("vol", "ext-vol", "mock", model.AccessModeSingleNodeWriter, attachment)
	m := newMockPlugin(t, n, stage, attach)

	capability := capabilityOf(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, block)
	staging := filepath.Join(n.root, "mock", "staging", "default", "vol")
	target := filepath.Join(n.root, "mock", "per-alloc", "web-1", "default", "vol")
	var pc map[string]string
	if attach {
		pc = publishContext
	}
	var stagingArg string
	if stage {
		stagingArg = staging
	}
	calls := []any{m.nodeCaps(), m.controllerCaps()}
	if attach {
		calls = append(calls,
			m.Node.EXPECT().NodeGetInfo(gomock.Any(), gomock.Any()).Return(&csipb.NodeGetInfoResponse{NodeId: "plugin-node-1"}, nil),
			m.Controller.EXPECT().ControllerPublishVolume(gomock.Any(), csitest.ProtoEq(&csipb.ControllerPublishVolumeRequest{
				VolumeId: "ext-vol", NodeId: "plugin-node-1", VolumeCapability: capability,
				Secrets: volumeSecrets, VolumeContext: volumeContext,
			})).Return(&csipb.ControllerPublishVolumeResponse{PublishContext: publishContext}, nil))
	}
	if stage {
		calls = append(calls, m.Node.EXPECT().NodeStageVolume(gomock.Any(), csitest.ProtoEq(&csipb.NodeStageVolumeRequest{
			VolumeId: "ext-vol", PublishContext: pc, StagingTargetPath: staging, VolumeCapability: capability,
			Secrets: volumeSecrets, VolumeContext: volumeContext,
		})).Return(&csipb.NodeStageVolumeResponse{}, nil))
	}
	calls = append(calls,
		m.Node.EXPECT().NodePublishVolume(gomock.Any(), csitest.ProtoEq(&csipb.NodePublishVolumeRequest{
			VolumeId: "ext-vol", PublishContext: pc, StagingTargetPath: stagingArg, TargetPath: target,
			VolumeCapability: capability, Readonly: readOnly, Secrets: volumeSecrets, VolumeContext: volumeContext,
		})).Return(&csipb.NodePublishVolumeResponse{}, nil),
		m.nodeCaps(), // the status of the published volume asks for stats; the plugin has none
		m.Node.EXPECT().NodeUnpublishVolume(gomock.Any(), csitest.ProtoEq(&csipb.NodeUnpublishVolumeRequest{
			VolumeId: "ext-vol", TargetPath: target,
		})).Return(&csipb.NodeUnpublishVolumeResponse{}, nil))
	if stage {
		calls = append(calls, m.Node.EXPECT().NodeUnstageVolume(gomock.Any(), csitest.ProtoEq(&csipb.NodeUnstageVolumeRequest{
			VolumeId: "ext-vol", StagingTargetPath: staging,
		})).Return(&csipb.NodeUnstageVolumeResponse{}, nil))
	}
	if attach {
		calls = append(calls, m.Controller.EXPECT().ControllerUnpublishVolume(gomock.Any(), csitest.ProtoEq(&csipb.ControllerUnpublishVolumeRequest{
			VolumeId: "ext-vol", NodeId: "plugin-node-1", Secrets: volumeSecrets,
		})).Return(&csipb.ControllerUnpublishVolumeResponse{}, nil))
	}
	gomock.InOrder(calls...)

	res, err := n.manager.Mount(ctx, "", "vol", "web-1", readOnly)
	require.NoError(t, err)
	require.Equal(t, volumes.MountResult{TargetPath: target, StagingPath: stagingArg, IsDevice: block}, res)
	writers, readers, _ := n.catalog.claims("vol")
	if readOnly {
		require.Equal(t, []string{"web-1"}, readers)
	} else {
		require.Equal(t, []string{"web-1"}, writers)
	}
	rec := n.status("vol").Record
	require.NotNil(t, rec)
	require.Equal(t, "published", rec.GetPublishes()["web-1"].GetState())
	if attach {
		require.Equal(t, "plugin-node-1", rec.GetAttachment().GetNodeId(), "the plugin's node ID is stored with the attachment")
		require.Equal(t, publishContext, rec.GetAttachment().GetPublishContext())
	}
	require.NotContains(t, rec.String(), "s3cret", "secrets are never stored in the record")

	again, err := n.manager.Mount(ctx, "default", "vol", "web-1", readOnly)
	require.NoError(t, err, "mounting again what is mounted sends nothing")
	require.Equal(t, res, again)

	require.NoError(t, n.manager.Unmount(ctx, "default", "vol", "web-1"))
	require.Nil(t, n.status("vol").Record, "nothing is left on the node")
	writers, readers, _ = n.catalog.claims("vol")
	require.Empty(t, append(writers, readers...), "the unmount released the claim its mount made")
	require.False(t, exists(target))
}

// TestAReaderJoinsAWriterOnOneStage mounts a single-node-writer volume for a
// writer and then a reader: the volume is staged once, published twice (the
// second read-only), and unstaged and detached only after the last
// unpublish.
func TestAReaderJoinsAWriterOnOneStage(t *testing.T) {
	n := newNode(t, nil)
	n.catalog.add("vol", "ext-vol", "mock", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem)
	m := newMockPlugin(t, n, true, true)
	capability := capabilityOf(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false)
	staging := filepath.Join(n.root, "mock", "staging", "default", "vol")
	target := func(alloc string) string { return filepath.Join(n.root, "mock", "per-alloc", alloc, "default", "vol") }
	publish := func(alloc string, readOnly bool) *gomock.Call {
		return m.Node.EXPECT().NodePublishVolume(gomock.Any(), csitest.ProtoEq(&csipb.NodePublishVolumeRequest{
			VolumeId: "ext-vol", PublishContext: publishContext, StagingTargetPath: staging, TargetPath: target(alloc),
			VolumeCapability: capability, Readonly: readOnly, Secrets: volumeSecrets, VolumeContext: volumeContext,
		})).Return(&csipb.NodePublishVolumeResponse{}, nil)
	}
	unpublish := func(alloc string) *gomock.Call {
		return m.Node.EXPECT().NodeUnpublishVolume(gomock.Any(), csitest.ProtoEq(&csipb.NodeUnpublishVolumeRequest{
			VolumeId: "ext-vol", TargetPath: target(alloc)})).Return(&csipb.NodeUnpublishVolumeResponse{}, nil)
	}
	gomock.InOrder(
		m.nodeCaps(), m.controllerCaps(),
		m.Node.EXPECT().NodeGetInfo(gomock.Any(), gomock.Any()).Return(&csipb.NodeGetInfoResponse{NodeId: "pn"}, nil),
		m.Controller.EXPECT().ControllerPublishVolume(gomock.Any(), gomock.Any()).Return(&csipb.ControllerPublishVolumeResponse{PublishContext: publishContext}, nil),
		m.Node.EXPECT().NodeStageVolume(gomock.Any(), gomock.Any()).Return(&csipb.NodeStageVolumeResponse{}, nil),
		publish("writer", false),
		// The reader's mount asks no capabilities: the connection's cache
		// answers them.
		publish("reader", true),
		unpublish("writer"),
		m.nodeCaps(), // the status while the reader has it published
		unpublish("reader"),
		m.Node.EXPECT().NodeUnstageVolume(gomock.Any(), gomock.Any()).Return(&csipb.NodeUnstageVolumeResponse{}, nil),
		m.Controller.EXPECT().ControllerUnpublishVolume(gomock.Any(), csitest.ProtoEq(&csipb.ControllerUnpublishVolumeRequest{
			VolumeId: "ext-vol", NodeId: "pn", Secrets: volumeSecrets})).Return(&csipb.ControllerUnpublishVolumeResponse{}, nil),
	)
	_, err := n.manager.Mount(ctx, "", "vol", "writer", false)
	require.NoError(t, err)
	_, err = n.manager.Mount(ctx, "", "vol", "second-writer", false)
	require.ErrorIs(t, err, volumes.ErrClaimRefused, "a second writer is refused before any RPC")
	_, err = n.manager.Mount(ctx, "", "vol", "reader", true)
	require.NoError(t, err)
	writers, readers, _ := n.catalog.claims("vol")
	require.Equal(t, []string{"writer"}, writers)
	require.Equal(t, []string{"reader"}, readers)

	require.NoError(t, n.manager.Unmount(ctx, "", "vol", "writer"))
	rec := n.status("vol").Record
	require.Equal(t, "staged", rec.GetStage().GetState(), "the reader keeps the volume staged")
	require.NoError(t, n.manager.Unmount(ctx, "", "vol", "reader"))
	require.Nil(t, n.status("vol").Record)
}

// TestSecretsNeverReachTheStatus checks the status of a mounted volume
// carries no secret.
func TestSecretsNeverReachTheStatus(t *testing.T) {
	n := newNode(t, nil)
	n.catalog.add("vol", "vol", "mock", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem)
	m := newMockPlugin(t, n, true, false)
	m.nodeCaps().AnyTimes()
	m.controllerCaps().AnyTimes()
	m.Node.EXPECT().NodeStageVolume(gomock.Any(), gomock.Any()).Return(&csipb.NodeStageVolumeResponse{}, nil)
	m.Node.EXPECT().NodePublishVolume(gomock.Any(), gomock.Any()).Return(&csipb.NodePublishVolumeResponse{}, nil)
	_, err := n.manager.Mount(context.Background(), "", "vol", "a", false)
	require.NoError(t, err)
	st := n.status("vol")
	require.NotContains(t, st.Record.String(), "s3cret")
	n.stop() // the volume stays published; the mocks expect nothing more
}
