package volumes_test

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"go.uber.org/mock/gomock"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/errclass"
)

// TestAVolumeThePluginDoesNotKnowRollsBackAndFreesItsClaim is issue 25's
// recipe: a volume ID the driver does not know is mounted; NodeStageVolume
// answers NotFound, and so does the rollback's NodeUnstageVolume. CSI makes
// the way out idempotent, so NotFound there means nothing is left to undo:
// the rollback completes and the claim is released, rather than leaving
// the volume in "unstaging" with its writer's claim held for good.
func TestAVolumeThePluginDoesNotKnowRollsBackAndFreesItsClaim(t *testing.T) {
	n := newNode(t, nil)
	n.catalog.add("vol", "unknown-to-the-driver", "mock", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem)
	m := newMockPlugin(t, n, true, false)
	gomock.InOrder(
		m.nodeCaps(), m.controllerCaps(),
		m.Node.EXPECT().NodeStageVolume(gomock.Any(), gomock.Any()).Return(nil, status.Error(codes.NotFound, "no such volume")),
		m.Node.EXPECT().NodeUnstageVolume(gomock.Any(), gomock.Any()).Return(nil, status.Error(codes.NotFound, "no such volume")),
	)
	_, err := n.manager.Mount(ctx, "", "vol", "web-1", false)
	require.ErrorIs(t, err, csi.ErrNotFound)
	st := n.settle("vol")
	require.Nil(t, st.Record, "the rollback completed")
	n.requireNoWriter("vol", "the claim the mount made is released")
}

// TestAnUnmountThePluginAnswersNotFoundCompletes: NodeUnpublishVolume and
// NodeUnstageVolume answering NotFound (the plugin lost the volume, or
// already undid it) complete their steps, and the claim is released.
func TestAnUnmountThePluginAnswersNotFoundCompletes(t *testing.T) {
	n := newNode(t, nil)
	n.catalog.add("vol", "vol", "mock", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem)
	m := newMockPlugin(t, n, true, false)
	gomock.InOrder(
		m.nodeCaps(), m.controllerCaps(),
		m.Node.EXPECT().NodeStageVolume(gomock.Any(), gomock.Any()).Return(&csipb.NodeStageVolumeResponse{}, nil),
		m.Node.EXPECT().NodePublishVolume(gomock.Any(), gomock.Any()).Return(&csipb.NodePublishVolumeResponse{}, nil),
		m.Node.EXPECT().NodeUnpublishVolume(gomock.Any(), gomock.Any()).Return(nil, status.Error(codes.NotFound, "no such volume")),
		m.Node.EXPECT().NodeUnstageVolume(gomock.Any(), gomock.Any()).Return(nil, status.Error(codes.NotFound, "no such volume")),
	)
	_, err := n.manager.Mount(ctx, "", "vol", "web-1", false)
	require.NoError(t, err)
	require.NoError(t, n.manager.Unmount(ctx, "", "vol", "web-1"))
	require.Nil(t, n.settle("vol").Record)
	n.requireNoWriter("vol")
}

// TestAnUnmountThroughAMissingSocketFailsAtOnceAndKeepsTheMount: the
// plugin gone and its socket absent, or left behind with nothing listening,
// an unmount fails as a connection failure (503) at once (not after the
// RPC timeout), the mount is kept, and the way out completes once the
// plugin registers again.
func TestAnUnmountThroughAMissingSocketFailsAtOnceAndKeepsTheMount(t *testing.T) {
	n := newNode(t, func(c *volumes.Config) { c.RPCTimeout = time.Minute })
	p := newStrictPlugin(t, n, "hp")
	p.create(n, "vol", "hp", model.AccessModeSingleNodeWriter)
	res, err := n.manager.Mount(ctx, "", "vol", "web-1", false)
	require.NoError(t, err)

	p.stop()
	_ = os.Remove(p.socket)
	err = n.manager.Unmount(ctx, "", "vol", "web-1")
	require.ErrorIs(t, err, csi.ErrConnect)
	require.ErrorContains(t, err, "does not exist")
	require.Contains(t, mountsUnder(t, n.root), res.TargetPath, "the mount is kept")

	// A socket file nothing listens on (a plugin killed before it could
	// remove it) refuses the dial: that fails at once too, not after the
	// RPC timeout (a minute here, past the operation's deadline).
	stale, err := net.Listen("unix", p.socket)
	require.NoError(t, err)
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	require.NoError(t, stale.Close())
	err = n.manager.Unmount(ctx, "", "vol", "web-1")
	require.ErrorIs(t, err, errclass.Unavailable)
	require.Contains(t, mountsUnder(t, n.root), res.TargetPath, "the mount is kept")
	require.NoError(t, os.Remove(p.socket))

	p.serve()
	n.register(volumes.NodePluginType, "hp", "a2", p.socket)
	require.Eventually(t, func() bool { return n.status("vol").Record == nil }, wait, 10*time.Millisecond,
		"the way out did not complete once the plugin was back")
	require.Empty(t, mountsUnder(t, n.root))
}

// TestTheWayOutGoesToTheAllocationThatMountedWhileItIsRegistered runs two
// plugin processes with separate state, as a takeover does: a volume
// mounted through the older allocation is unmounted through it, not sent
// to the newer one (which does not know the volume); once the older one is
// deregistered, the way out goes to the current one, which answers
// NotFound, and the agent unmounts what the older one left.
func TestTheWayOutGoesToTheAllocationThatMountedWhileItIsRegistered(t *testing.T) {
	n := newNode(t, nil)
	serve := func(alloc string) *hostpathtest.Server {
		p := hostpathtest.Serve(t, hostpath.Config{Name: "hostpath", NodeID: "n1", Root: filepath.Join(hostpathtest.TempDir(t), alloc)})
		n.register(volumes.NodePluginType, "hp", alloc, p.Endpoint)
		return p
	}
	old := serve("a1")
	c, err := csi.Dial(ctx, old.Endpoint, csi.Options{})
	require.NoError(t, err)
	defer c.Close()
	for _, name := range []string{"vol", "vol2"} {
		created, err := c.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csipb.VolumeCapability{{
			AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}}})
		require.NoError(t, err)
		n.catalog.add(name, created.GetVolume().GetVolumeId(), "hp", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem)
	}
	_, err = n.manager.Mount(ctx, "", "vol", "web-1", false)
	require.NoError(t, err)
	_, err = n.manager.Mount(ctx, "", "vol2", "web-1", false)
	require.NoError(t, err)

	serve("a2") // a newer allocation takes over, with a state of its own
	require.NoError(t, n.manager.Unmount(ctx, "", "vol", "web-1"), "the way out went to the allocation that mounted")
	st := n.settle("vol")
	require.Nil(t, st.Record)
	require.NotContains(t, st.LastOperation, "not found")

	require.NoError(t, n.registry.DeregisterPlugin(volumes.NodePluginType, "hp", "a1"))
	require.NoError(t, n.manager.Unmount(ctx, "", "vol2", "web-1"))
	st = n.settle("vol2")
	require.Nil(t, st.Record)
	require.Contains(t, st.LastOperation, "does not exist", "the older allocation is deregistered: the way out went to the current one, which knows nothing of the volume")
	require.Empty(t, mountsUnder(t, n.root), "the agent unmounted what the older allocation left")
}

// TestAVolumeDeletedUnderItsMountsIsUnmountedByTheAgentWhenThePluginAnswersNotFound
// is issue 41's third recipe: a volume deleted under its mounts (as the
// upstream hostpath driver deletes a volume in use) makes the plugin
// answer NotFound at NodeUnpublishVolume and NodeUnstageVolume without
// unmounting. The agent unmounts the target and the staging path itself,
// as kubelet's mount cleanup does, removes the target, completes the way
// out at once (no "target busy" retried for ever) and says what the driver
// answered, never that NodeUnpublishVolume succeeded.
func TestAVolumeDeletedUnderItsMountsIsUnmountedByTheAgentWhenThePluginAnswersNotFound(t *testing.T) {
	n, plugin := newHostpathNode(t, nil, nil)
	external := (&strictPlugin{t: t, socket: plugin.Endpoint}).createVolume("vol")
	n.catalog.add("vol", external, "hp", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem)
	res, err := n.manager.Mount(ctx, "", "vol", "web-1", false)
	require.NoError(t, err)
	require.Contains(t, mountsUnder(t, n.root), res.TargetPath)

	hostpathtest.ForgetVolume(t, plugin.Driver.Config().Root, external)
	require.NoError(t, n.manager.Unmount(ctx, "", "vol", "web-1"))
	require.Empty(t, mountsUnder(t, n.root), "the agent unmounted the target and the staging path")
	require.NoDirExists(t, res.TargetPath)
	st := n.status("vol")
	require.Nil(t, st.Record, "the way out completed")
	require.Empty(t, st.LastError)
	require.Contains(t, st.LastOperation, "NodeUnpublishVolume: not found: hostpath: volume "+external+" does not exist; the target "+res.TargetPath+" was still mounted: the agent unmounted it")
	require.Contains(t, st.LastOperation, "NodeUnstageVolume: not found: hostpath: volume "+external+" does not exist; the staging path ")
	require.NotContains(t, st.LastOperation, "succeeded")
	n.requireNoWriter("vol", "the claim the mount made is released")
}
