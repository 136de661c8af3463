package controller_test

import (
	"context"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"go.uber.org/mock/gomock"

	"github.com/plugvisor/plugvisor/csi/controller"
	"github.com/plugvisor/plugvisor/csi/csitest"
)

const listVolumesCap = csipb.ControllerServiceCapability_RPC_LIST_VOLUMES

// TestARestoreOrACloneWithoutASizeTakesItsSourcesSize is issue 41's first
// recipe on the reference plugin, which refuses a volume smaller than its
// source as upstream's hostpath driver does (no size is 0): a volume made
// from a snapshot of a 3 MiB volume, or cloned from it, without a size,
// gets 3 MiB, the snapshot's size (ListSnapshots) and the source volume's
// (the catalog's record); one asked smaller is refused naming the field,
// and no plugin volume is made.
func TestARestoreOrACloneWithoutASizeTakesItsSourcesSize(t *testing.T) {
	f, _ := hostpathFixture(t)
	ctx := context.Background()
	_, err := f.ctl.Create(ctx, hostpathCreate("", "db"))
	require.NoError(t, err)
	_, err = f.ctl.Expand(ctx, "", "db", 3<<20, 0)
	require.NoError(t, err)
	snap, err := f.ctl.CreateSnapshot(ctx, controller.SnapshotRequest{VolumeID: "db", Name: "nightly"})
	require.NoError(t, err)

	restore := hostpathCreate("", "restored")
	restore.SnapshotID, restore.RequiredBytes = snap.ID, 0
	clone := hostpathCreate("", "cloned")
	clone.CloneFrom, clone.RequiredBytes = "db", 0
	for _, req := range []controller.CreateRequest{restore, clone} {
		v, err := f.ctl.Create(ctx, req)
		require.NoError(t, err, req.ID)
		require.Equal(t, int64(3<<20), v.CapacityBytes, req.ID)
	}

	restore.ID, restore.Name, restore.RequiredBytes = "small", "", 1<<20
	_, err = f.ctl.Create(ctx, restore)
	require.ErrorIs(t, err, controller.ErrInvalidRequest)
	require.ErrorContains(t, err, `capacity.required_bytes 1048576 is less than the 3145728 bytes of snapshot "`+snap.ID+`"`)
	clone.ID, clone.Name, clone.RequiredBytes, clone.LimitBytes = "small", "", 0, 2<<20
	_, err = f.ctl.Create(ctx, clone)
	require.ErrorIs(t, err, controller.ErrInvalidRequest)
	require.ErrorContains(t, err, "capacity.limit_bytes 2097152 is less than the 3145728 bytes of source volume default/db")
	require.Len(t, f.volumes(), 3, "the refused creates made nothing")
}

// TestASizeSmallerThanTheSourceIsRefusedBeforeCreateVolume: the source's
// size comes from ListSnapshots, or from ListVolumes when the catalog does
// not know the source volume's; a smaller size is refused with no
// CreateVolume sent, and no size is filled with the source's. A plugin
// that lists neither gets the request as it was given.
func TestASizeSmallerThanTheSourceIsRefusedBeforeCreateVolume(t *testing.T) {
	f := newFixture(t, nil)
	m := f.serveMocks()
	src := f.registerVolume("db") // of unknown capacity in the catalog
	snapshots := &csipb.ListSnapshotsResponse{Entries: []*csipb.ListSnapshotsResponse_Entry{{Snapshot: &csipb.Snapshot{
		SnapshotId: "snap-1", SourceVolumeId: "pv-db", SizeBytes: 8 << 20, ReadyToUse: true}}}}
	volumes := &csipb.ListVolumesResponse{Entries: []*csipb.ListVolumesResponse_Entry{
		{Volume: &csipb.Volume{VolumeId: "other", CapacityBytes: 1}},
		{Volume: &csipb.Volume{VolumeId: src.PluginVolumeID(), CapacityBytes: 8 << 20}},
	}}
	restore := createRequest()
	restore.ID, restore.SnapshotID = "restored", "snap-1"
	clone := createRequest()
	clone.ID, clone.CloneFrom = "db-copy", "db"
	gomock.InOrder(
		expectCaps(m, createDelete, snapshotCap, listSnapCap),
		m.Controller.EXPECT().ListSnapshots(gomock.Any(), csitest.ProtoEq(&csipb.ListSnapshotsRequest{SnapshotId: "snap-1"})).Return(snapshots, nil),
		expectCaps(m, createDelete, cloneCap, listVolumesCap),
		m.Controller.EXPECT().ListVolumes(gomock.Any(), gomock.Any()).Return(volumes, nil),
	)
	for _, req := range []controller.CreateRequest{restore, clone} {
		_, err := f.ctl.Create(context.Background(), req)
		require.ErrorIs(t, err, controller.ErrInvalidRequest, req.ID)
		require.ErrorContains(t, err, "capacity.required_bytes 1048576 is less than the 8388608 bytes of", req.ID)
	}

	want := wantCreateVolume()
	want.Name = "restored"
	want.CapacityRange = &csipb.CapacityRange{RequiredBytes: 8 << 20}
	want.VolumeContentSource = &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{
		Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: "snap-1"}}}
	gomock.InOrder(
		expectCaps(m, createDelete, snapshotCap, listSnapCap),
		m.Controller.EXPECT().ListSnapshots(gomock.Any(), gomock.Any()).Return(snapshots, nil),
		m.Controller.EXPECT().CreateVolume(gomock.Any(), csitest.ProtoEq(want)).Return(createdAnswer(), nil),
	)
	restore.RequiredBytes, restore.LimitBytes = 0, 0
	_, err := f.ctl.Create(context.Background(), restore)
	require.NoError(t, err, "no size is the snapshot's")

	want = wantCreateVolume()
	want.Name = "db-copy"
	want.VolumeContentSource = &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Volume{
		Volume: &csipb.VolumeContentSource_VolumeSource{VolumeId: src.PluginVolumeID()}}}
	gomock.InOrder(
		expectCaps(m, createDelete, cloneCap),
		m.Controller.EXPECT().CreateVolume(gomock.Any(), csitest.ProtoEq(want)).Return(&csipb.CreateVolumeResponse{Volume: &csipb.Volume{VolumeId: "pv-copy"}}, nil),
	)
	_, err = f.ctl.Create(context.Background(), clone)
	require.NoError(t, err, "a plugin that lists no volumes gets the size asked")
}
