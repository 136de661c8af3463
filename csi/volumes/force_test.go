package volumes_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/volumes"
)

// TestAForcedUnmountClearsAVolumeWhosePluginIsGoneForGood: the plugin gone
// for good (its socket removed, nothing registered again), the unmount
// keeps failing; the operator's forced unmount unmounts the target and the
// staging path in the kernel and releases the claim, the attachment the
// controller could not undo stays recorded, and the status says what was
// forced. A forced unmount of an alloc without a mount changes nothing.
func TestAForcedUnmountClearsAVolumeWhosePluginIsGoneForGood(t *testing.T) {
	n, p := newStrictNode(t, nil, "vol")
	n.mount("vol", "web-1")
	require.ErrorIs(t, n.manager.ForceUnmount(ctx, "", "vol", "web-2"), volumes.ErrNotMounted)

	p.stop()
	_ = os.Remove(p.socket) // gone with the listener, if not already
	require.ErrorIs(t, n.manager.Unmount(ctx, "", "vol", "web-1"), csi.ErrConnect)
	require.NoError(t, n.manager.ForceUnmount(ctx, "", "vol", "web-1"))

	st := n.settle("vol")
	require.Empty(t, mountsUnder(t, n.root), "the agent unmounted the target and the staging path")
	require.Empty(t, st.Record.GetPublishes())
	require.Nil(t, st.Record.GetStage())
	require.NotNil(t, st.Record.GetAttachment(), "the attachment the controller could not undo stays recorded")
	require.Contains(t, st.LastOperation, "unmount -force web-1 (forced: NodeUnpublishVolume failed")
	require.Contains(t, st.LastOperation, "the agent unmounted the staging path")
	require.Contains(t, st.LastOperation, "the attachment stays recorded")
	n.requireNoWriter("vol", "the claim is released")
}

// TestAForcedUnmountLeavesTheStagingDirectoryToTheSweep: NodeUnstageVolume
// fails, the agent unmounts the staging path itself, and the directory
// stays, unmounted, as after any unmount, until a sweep finds the volume
// idle.
func TestAForcedUnmountLeavesTheStagingDirectoryToTheSweep(t *testing.T) {
	clock := fakeClock()
	n, p := newStrictNode(t, clock, "vol")
	staging := n.stagingDir("vol")
	n.mount("vol", "web-1")
	st := forceWithAFailing(t, n, p, "NodeUnstageVolume")
	require.Contains(t, st.LastOperation, "the agent unmounted the staging path")
	require.Nil(t, st.Record, "the volume is idle")
	require.Empty(t, mountsUnder(t, n.root))
	require.DirExists(t, staging, "the staging directory stays for the sweep")
	sweep(n, clock)
	require.NoDirExists(t, staging, "the sweep removed it")
}

// TestAForcedUnmountThatCannotRemoveTheTargetStillEnds: when the plugin's
// NodeUnpublishVolume fails, the agent unmounts the target itself; a
// target it then cannot remove (something was written under the mount
// point) stays, said in the note, and the force still ends the mount.
func TestAForcedUnmountThatCannotRemoveTheTargetStillEnds(t *testing.T) {
	n, p := newStrictNode(t, nil, "vol")
	res := n.mount("vol", "web-1")
	// A file under the mount point: hidden while mounted, there once not.
	require.NoError(t, unix.Unmount(res.TargetPath, 0))
	require.NoError(t, os.WriteFile(filepath.Join(res.TargetPath, "left"), nil, 0o600))
	require.NoError(t, unix.Mount(n.stagingDir("vol"), res.TargetPath, "", unix.MS_BIND, ""))
	st := forceWithAFailing(t, n, p, "NodeUnpublishVolume")
	require.Contains(t, st.LastOperation, "the agent unmounted the target and left it")
	require.Nil(t, st.Record, "the volume is idle")
	require.Empty(t, mountsUnder(t, n.root))
	require.FileExists(t, filepath.Join(res.TargetPath, "left"))
}

// forceWithAFailing force-unmounts volume vol of alloc web-1 with the
// plugin's rpc failing, and returns the volume's status once settled.
func forceWithAFailing(t *testing.T, n *node, p *strictPlugin, rpc string) volumes.Status {
	t.Helper()
	f := p.hang(rpc, false)
	go func() {
		<-f.reached
		p.unhang(f) // fails the call
	}()
	require.NoError(t, n.manager.ForceUnmount(ctx, "", "vol", "web-1"))
	return n.settle("vol")
}
