package controller_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"go.uber.org/mock/gomock"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/controller"
	"github.com/plugvisor/plugvisor/csi/csitest"
)

const cloneCap = csipb.ControllerServiceCapability_RPC_CLONE_VOLUME

// cloneRequest is createRequest as a clone of the registered volume src.
func cloneRequest(src string) controller.CreateRequest {
	req := createRequest()
	req.ID, req.CloneFrom = "db-copy", src
	return req
}

func TestACloneSendsItsSourcesPluginVolumeIDAsTheContentSource(t *testing.T) {
	f := newFixture(t, nil)
	m := f.serveMocks()
	src := f.registerVolume("db")
	want := wantCreateVolume()
	want.Name = "db-copy"
	want.VolumeContentSource = &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Volume{
		Volume: &csipb.VolumeContentSource_VolumeSource{VolumeId: src.PluginVolumeID()}}}
	gomock.InOrder(
		expectCaps(m, createDelete, cloneCap),
		m.Controller.EXPECT().CreateVolume(gomock.Any(), csitest.ProtoEq(want)).Return(createdAnswer(), nil),
	)
	v, err := f.ctl.Create(context.Background(), cloneRequest("db"))
	require.NoError(t, err)
	require.Equal(t, "db-copy", v.ID)
}

// TestACloneIsRefusedBeforeCreateVolume: without CLONE_VOLUME, of a volume
// of another plugin (naming both), of an unknown volume, or with bad
// fields, no CreateVolume is sent and nothing changes.
func TestACloneIsRefusedBeforeCreateVolume(t *testing.T) {
	f := newFixture(t, nil)
	m := f.serveMocks() // CreateVolume is never expected
	f.registerVolume("db")
	other := model.NewCSIVolume("theirs", 0)
	other.PluginID, other.AccessMode, other.AttachmentMode = "other-plugin", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem
	_, err := f.cat.RegisterVolume(context.Background(), other)
	require.NoError(t, err)
	before := f.volumes()

	expectCaps(m, createDelete)
	_, err = f.ctl.Create(context.Background(), cloneRequest("db"))
	require.ErrorIs(t, err, controller.ErrUnsupported)
	require.ErrorContains(t, err, `plugin "disk" does not advertise CLONE_VOLUME`)

	_, err = f.ctl.Create(context.Background(), cloneRequest("theirs"))
	require.ErrorIs(t, err, controller.ErrInvalidRequest)
	require.ErrorContains(t, err, "clone_from")
	require.ErrorContains(t, err, `"other-plugin"`)
	require.ErrorContains(t, err, `"disk"`)

	_, err = f.ctl.Create(context.Background(), cloneRequest("nope"))
	require.ErrorIs(t, err, model.ErrVolumeNotFound)
	require.ErrorContains(t, err, "clone_from")

	for field, change := range map[string]func(*controller.CreateRequest){
		"clone_from and snapshot_id":  func(r *controller.CreateRequest) { r.SnapshotID = "snap-1" },
		"clone_from names the volume": func(r *controller.CreateRequest) { r.ID = "db" },
		`clone_from "a/b"`:            func(r *controller.CreateRequest) { r.CloneFrom = "a/b" },
	} {
		req := cloneRequest("db")
		change(&req)
		_, err = f.ctl.Create(context.Background(), req)
		require.ErrorIs(t, err, controller.ErrInvalidRequest, field)
		require.ErrorContains(t, err, field)
	}
	require.Equal(t, before, f.volumes(), "nothing changed")
}

func TestACloneOnTheHostpathPluginHasItsSourcesFiles(t *testing.T) {
	f, root := hostpathFixture(t)
	ctx := context.Background()
	src, err := f.ctl.Create(ctx, hostpathCreate("", "db"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(root, "volumes", src.ExternalID, "data.txt"), []byte("hello"), 0o644))
	req := hostpathCreate("", "db-copy")
	req.CloneFrom = "db"
	clone, err := f.ctl.Create(ctx, req)
	require.NoError(t, err)
	require.NotEqual(t, src.ExternalID, clone.ExternalID)
	data, err := os.ReadFile(filepath.Join(root, "volumes", clone.ExternalID, "data.txt"))
	require.NoError(t, err)
	require.Equal(t, "hello", string(data))
}
