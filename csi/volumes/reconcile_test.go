package volumes_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/storage"
)

// TestAPublishedVolumeTheKernelLostIsPublishedAgainAtStart unmounts a
// published target behind the agent's back while it is down: the reconcile
// at start stages and publishes it again, so records and kernel agree.
func TestAPublishedVolumeTheKernelLostIsPublishedAgainAtStart(t *testing.T) {
	n, _, res := lostWhileDown(t)
	require.NotContains(t, mountsUnder(t, n.root), res.TargetPath)

	n.start()
	st := n.settle("vol")
	require.Equal(t, "reconcile", st.LastOperation)
	require.Empty(t, st.LastError)
	require.Contains(t, mountsUnder(t, n.root), res.TargetPath, "the target is mounted again")
	require.NoError(t, n.manager.Unmount(ctx, "", "vol", "web-1"))
	require.Empty(t, mountsUnder(t, n.root))
}

// lostWhileDown mounts a single-node-writer volume "vol" on the strict
// plugin for alloc web-1, stops the node's manager, and unmounts the
// target behind its back, as a node's restart can lose a mount.
func lostWhileDown(t *testing.T) (*node, *strictPlugin, volumes.MountResult) {
	t.Helper()
	n := newNode(t, nil)
	p := newStrictPlugin(t, n, "hp")
	p.create(n, "vol", "hp", model.AccessModeSingleNodeWriter)
	res, err := n.manager.Mount(ctx, "", "vol", "web-1", false)
	require.NoError(t, err)
	n.stop()
	require.NoError(t, unix.Unmount(res.TargetPath, unix.MNT_DETACH))
	return n, p, res
}

// TestAMountNoRecordExplainsIsReportedAsAnOrphan bind-mounts a directory
// at a target path of the root with no record: the manager reports it in
// the volume's status and leaves it alone.
func TestAMountNoRecordExplainsIsReportedAsAnOrphan(t *testing.T) {
	n := newNode(t, nil)
	n.stop()
	src := t.TempDir()
	target := filepath.Join(n.root, "hp", "per-alloc", "ghost", "default", "vol")
	require.NoError(t, os.MkdirAll(target, 0o700))
	require.NoError(t, unix.Mount(src, target, "", unix.MS_BIND, ""))
	t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })

	n.start()
	require.Equal(t, []string{target}, n.status("vol").Orphans)
	require.Empty(t, n.status("other").Orphans)
	require.Contains(t, mountsUnder(t, n.root), target, "an orphan is reported, not unmounted")
}

// TestACorruptRecordStopsTheStart writes a record that does not decode:
// the manager refuses to start rather than forget what is mounted.
func TestACorruptRecordStopsTheStart(t *testing.T) {
	n := newNode(t, nil)
	n.stop()
	store, err := storage.OpenBolt(n.dbPath, storage.BoltOptions{})
	require.NoError(t, err)
	bucket, err := store.Bucket(volumes.Bucket)
	require.NoError(t, err)
	require.NoError(t, bucket.Apply([]storage.Op{storage.Put([]byte("volume/default/vol"), []byte{0xff, 0x01})}))
	cfg := n.cfg
	cfg.Bucket = bucket
	_, err = volumes.Start(probe.NewSystem(t), cfg)
	require.ErrorIs(t, err, volumes.ErrCorrupt)
	require.ErrorContains(t, err, "volume/default/vol")
	require.NoError(t, store.Close())
}

// TestTwoNamespacesKeepTheirOwnPaths mounts volumes of the same ID in two
// namespaces for one alloc: each gets its own target and staging path, and
// unmounting one leaves the other mounted.
func TestTwoNamespacesKeepTheirOwnPaths(t *testing.T) {
	n := newNode(t, nil)
	p := newStrictPlugin(t, n, "hp")
	p.createIn(n, "ns1", "data", "data-1", "hp", model.AccessModeSingleNodeWriter)
	p.createIn(n, "ns2", "data", "data-2", "hp", model.AccessModeSingleNodeWriter)
	one, err := n.manager.Mount(ctx, "ns1", "data", "web", false)
	require.NoError(t, err)
	two, err := n.manager.Mount(ctx, "ns2", "data", "web", false)
	require.NoError(t, err)
	require.NotEqual(t, one.TargetPath, two.TargetPath)
	require.NotEqual(t, one.StagingPath, two.StagingPath)
	require.NoError(t, os.WriteFile(filepath.Join(one.TargetPath, "f"), []byte("one"), 0o600))
	_, err = os.Stat(filepath.Join(two.TargetPath, "f"))
	require.ErrorIs(t, err, os.ErrNotExist, "the two namespaces' volumes are different plugin volumes")

	require.NoError(t, n.manager.Unmount(ctx, "ns1", "data", "web"))
	require.Equal(t, []string{two.TargetPath}, mountsUnder(t, filepath.Join(n.root, "hp", "per-alloc")))
	require.NoError(t, n.manager.Unmount(ctx, "ns2", "data", "web"))
	require.Empty(t, mountsUnder(t, n.root))
}
