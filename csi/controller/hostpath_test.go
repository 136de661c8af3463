package controller_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/controller"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
)

// hostpathFixture is a controller over the reference hostpath plugin,
// registered as the csi-controller "hostpath".
func hostpathFixture(t *testing.T) (*fixture, string) {
	t.Helper()
	f := newFixture(t, nil)
	root := hostpathtest.TempDir(t)
	srv := hostpathtest.Serve(t, hostpath.Config{NodeID: "node-1", Root: root})
	f.registerController("hostpath", srv.Endpoint)
	return f, root
}

func hostpathCreate(namespace, id string) controller.CreateRequest {
	return controller.CreateRequest{
		Namespace: namespace, ID: id, PluginID: "hostpath", RequiredBytes: 1 << 20,
		Secrets:    map[string]string{"token": secretValue},
		AccessMode: model.AccessModeSingleNodeWriter, AttachmentMode: model.AttachmentModeFileSystem,
	}
}

func TestTheVolumeLifecycleEndToEndWithTheHostpathPlugin(t *testing.T) {
	f, root := hostpathFixture(t)
	ctx := context.Background()

	v, err := f.ctl.Create(ctx, hostpathCreate("", "db"))
	require.NoError(t, err)
	require.NotEmpty(t, v.ExternalID)
	require.Equal(t, int64(1<<20), v.CapacityBytes)
	require.Equal(t, []*model.Topology{{Segments: map[string]string{hostpath.TopologyKey: "node-1"}}}, v.Topologies)
	registered, err := f.cat.GetVolume(ctx, "", "db")
	require.NoError(t, err)
	require.Equal(t, v, registered, "the created volume is visible in the catalog")
	volumeDir := filepath.Join(root, "volumes", v.ExternalID)
	require.DirExists(t, volumeDir)
	require.NoError(t, os.WriteFile(filepath.Join(volumeDir, "data.txt"), []byte("hello"), 0o644))

	again, err := f.ctl.Create(ctx, hostpathCreate("", "db"))
	require.NoError(t, err, "creating again is idempotent")
	require.Equal(t, v.ModifyIndex, again.ModifyIndex, "and changes nothing")

	res, err := f.ctl.Expand(ctx, "", "db", 3<<20, 0)
	require.NoError(t, err)
	require.Equal(t, int64(3<<20), res.CapacityBytes)
	require.True(t, res.NodeExpansionRequired, "the hostpath plugin asks for node expansion")
	require.Equal(t, int64(3<<20), res.Volume.CapacityBytes)

	snap, err := f.ctl.CreateSnapshot(ctx, controller.SnapshotRequest{VolumeID: "db", Name: "nightly"})
	require.NoError(t, err)
	require.Equal(t, v.ExternalID, snap.SourceVolumeID)
	require.True(t, snap.ReadyToUse)
	list, err := f.ctl.ListSnapshots(ctx, controller.ListSnapshotsRequest{VolumeID: "db"})
	require.NoError(t, err)
	require.Equal(t, []controller.Snapshot{snap}, list)

	fromSnap := hostpathCreate("", "db-copy")
	fromSnap.SnapshotID, fromSnap.RequiredBytes = snap.ID, 0
	cp, err := f.ctl.Create(ctx, fromSnap)
	require.NoError(t, err)
	require.Equal(t, int64(3<<20), cp.CapacityBytes, "no size is the snapshot's")
	data, err := os.ReadFile(filepath.Join(root, "volumes", cp.ExternalID, "data.txt"))
	require.NoError(t, err)
	require.Equal(t, "hello", string(data), "the volume made from the snapshot holds the snapshot's files")

	require.NoError(t, f.ctl.Delete(ctx, "", "db-copy"))
	require.NoError(t, f.ctl.DeleteSnapshot(ctx, "hostpath", snap.ID, nil))
	list, err = f.ctl.ListSnapshots(ctx, controller.ListSnapshotsRequest{PluginID: "hostpath"})
	require.NoError(t, err)
	require.Empty(t, list)
	require.NoError(t, f.ctl.Delete(ctx, "", "db"))
	require.Empty(t, f.volumes())
	require.NoDirExists(t, volumeDir, "the plugin deleted the volume")
}

func TestOnePluginVolumeCannotBeCreatedInTwoNamespaces(t *testing.T) {
	f, _ := hostpathFixture(t)
	ctx := context.Background()
	first, err := f.ctl.Create(ctx, hostpathCreate("team-a", "db"))
	require.NoError(t, err)

	// The same name gives the same plugin volume: the catalog refuses to
	// file it under a second namespace, and leaves the plugin volume alone.
	_, err = f.ctl.Create(ctx, hostpathCreate("team-b", "db"))
	require.ErrorIs(t, err, model.ErrVolumeConflict)
	require.Contains(t, err.Error(), `catalog volume "db" in namespace "team-a"`)
	_, err = f.cat.GetVolume(ctx, "team-b", "db")
	require.ErrorIs(t, err, model.ErrVolumeNotFound)

	other := hostpathCreate("team-b", "db")
	other.Name = "team-b-db"
	second, err := f.ctl.Create(ctx, other)
	require.NoError(t, err, "another name is another plugin volume")
	require.NotEqual(t, first.ExternalID, second.ExternalID)

	require.NoError(t, f.ctl.Delete(ctx, "team-a", "db"))
	require.NoError(t, f.ctl.Delete(ctx, "team-b", "db"))
}

func TestAClaimedVolumeIsNotDeletedOnTheHostpathPlugin(t *testing.T) {
	f, root := hostpathFixture(t)
	ctx := context.Background()
	v, err := f.ctl.Create(ctx, hostpathCreate("", "db"))
	require.NoError(t, err)
	f.healthy("hostpath")
	require.NoError(t, f.cat.Claim(ctx, csi.ClaimRequest{VolumeID: "db", AllocID: "web-1", Usage: csi.Usage{ReadOnly: true}}))

	err = f.ctl.Delete(ctx, "", "db")
	require.ErrorIs(t, err, model.ErrVolumeInUse)
	require.Contains(t, err.Error(), "web-1")
	require.DirExists(t, filepath.Join(root, "volumes", v.ExternalID))

	require.NoError(t, f.cat.Release(ctx, csi.ClaimRequest{VolumeID: "db", AllocID: "web-1"}))
	require.NoError(t, f.ctl.Delete(ctx, "", "db"))
	require.NoDirExists(t, filepath.Join(root, "volumes", v.ExternalID))
}

func TestACrashBetweenCreateVolumeAndTheRegistrationHealsWithTheHostpathPlugin(t *testing.T) {
	f, root := hostpathFixture(t)
	ctx := context.Background()
	f.cat.failNextRegister.Store(true)
	_, err := f.ctl.Create(ctx, hostpathCreate("", "db"))
	require.ErrorIs(t, err, errCrash)
	require.Empty(t, f.volumes())
	entries, err := os.ReadDir(filepath.Join(root, "volumes"))
	require.NoError(t, err)
	require.Len(t, entries, 1, "the plugin made the volume before the crash")

	v, err := f.ctl.Create(ctx, hostpathCreate("", "db"))
	require.NoError(t, err)
	require.Equal(t, entries[0].Name(), v.ExternalID, "running create again registers the volume the plugin made")
	entries, err = os.ReadDir(filepath.Join(root, "volumes"))
	require.NoError(t, err)
	require.Len(t, entries, 1, "and makes no second one")
}
