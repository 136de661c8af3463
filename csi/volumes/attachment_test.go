package volumes_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
)

// mountedOnStrict is a node with volume "vol" of the strict attaching
// plugin mounted for web-1; it returns the plugin's volume ID too.
func mountedOnStrict(t *testing.T) (*node, *strictPlugin, string) {
	t.Helper()
	n := newNode(t, nil)
	p := newStrictPlugin(t, n, "hp")
	ext := p.create(n, "vol", "hp", model.AccessModeSingleNodeWriter)
	_, err := n.manager.Mount(ctx, "", "vol", "web-1", false)
	require.NoError(t, err)
	return n, p, ext
}

// TestAnAttachmentTheControllerLostIsPublishedAgainAtStart mounts a volume
// of an attaching plugin, makes the controller forget the attachment
// behind the agent's back, and restarts the volume manager: its reconcile
// sees in ListVolumes that the volume is no longer published to this node
// and sends ControllerPublishVolume again, so that the unmount then
// detaches what is really attached.
func TestAnAttachmentTheControllerLostIsPublishedAgainAtStart(t *testing.T) {
	n, p, ext := mountedOnStrict(t)
	p.storage.detach(ext, "")
	p.mu.Lock()
	before := len(p.calls)
	p.mu.Unlock()

	n.restart()

	st := n.settle("vol")
	require.Equal(t, "attached", st.Record.GetAttachment().GetState())
	require.Empty(t, st.Record.GetAttachment().GetLastError())
	attached, _, _ := p.state()
	require.Equal(t, []string{ext}, attached, "the reconcile attached the volume again")
	p.mu.Lock()
	after := slices.Clone(p.calls[before:])
	p.mu.Unlock()
	require.Contains(t, after, "ListVolumes")
	require.Contains(t, after, "ControllerPublishVolume")

	require.NoError(t, n.manager.Unmount(ctx, "", "vol", "web-1"))
	attached, published, violations := p.state()
	require.Empty(t, attached)
	require.Empty(t, published)
	require.Empty(t, violations)
}

// TestAnAttachmentTheControllerStillHasIsLeftAlone restarts the manager
// over a mounted volume the controller lists as published here: the
// reconcile asks ListVolumes and sends no ControllerPublishVolume.
func TestAnAttachmentTheControllerStillHasIsLeftAlone(t *testing.T) {
	n, p, _ := mountedOnStrict(t)
	p.mu.Lock()
	before := len(p.calls)
	p.mu.Unlock()

	n.restart()

	st := n.settle("vol")
	require.Empty(t, st.Record.GetAttachment().GetLastError())
	p.mu.Lock()
	after := slices.Clone(p.calls[before:])
	p.mu.Unlock()
	require.Contains(t, after, "ListVolumes")
	require.NotContains(t, after, "ControllerPublishVolume")
	require.NoError(t, n.manager.Unmount(ctx, "", "vol", "web-1"))
}

// TestAVolumeTheControllerNoLongerListsIsShownInTheStatus restarts the
// manager over a mounted volume the controller no longer lists: the
// attachment keeps the record's state and gets a last error that says so,
// which clears once the controller lists it again.
func TestAVolumeTheControllerNoLongerListsIsShownInTheStatus(t *testing.T) {
	n, p, ext := mountedOnStrict(t)
	p.mu.Lock()
	p.unlisted[ext] = true
	p.mu.Unlock()

	n.restart()

	st := n.settle("vol")
	require.Equal(t, "attached", st.Record.GetAttachment().GetState())
	require.Contains(t, st.Record.GetAttachment().GetLastError(), "ListVolumes: the controller does not list volume")
	require.Equal(t, "published", st.Record.GetPublishes()["web-1"].GetState(), "the mount is left as it is")

	p.mu.Lock()
	delete(p.unlisted, ext)
	p.mu.Unlock()
	n.restart()
	require.Empty(t, n.settle("vol").Record.GetAttachment().GetLastError())
	require.NoError(t, n.manager.Unmount(ctx, "", "vol", "web-1"))
}
