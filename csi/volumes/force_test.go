package volumes_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/volumes"
)

// TestAForcedUnmountClearsAVolumeWhosePluginIsGoneForGood: the plugin gone
// for good (its socket removed, nothing registered again), the unmount
// keeps failing; the operator's forced unmount unmounts the target and the
// staging path in the kernel and releases the claim, the attachment the
// controller could not undo stays recorded, and the status says what was
// forced. A forced unmount of an alloc without a mount changes nothing.
func TestAForcedUnmountClearsAVolumeWhosePluginIsGoneForGood(t *testing.T) {
	n := newNode(t, nil)
	p := newStrictPlugin(t, n, "hp")
	p.create(n, "vol", "hp", model.AccessModeSingleNodeWriter)
	_, err := n.manager.Mount(ctx, "", "vol", "web-1", false)
	require.NoError(t, err)
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
	writers, _, _ := n.catalog.claims("vol")
	require.Empty(t, writers, "the claim is released")
}
