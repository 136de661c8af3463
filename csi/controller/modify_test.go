package controller_test

import (
	"context"
	"fmt"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"go.uber.org/mock/gomock"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/controller"
	"github.com/plugvisor/plugvisor/csi/csitest"
	"github.com/plugvisor/plugvisor/csi/hostpath"
)

const modifyCap = csipb.ControllerServiceCapability_RPC_MODIFY_VOLUME

func TestModifySendsTheExactControllerModifyVolume(t *testing.T) {
	f := newFixture(t, nil)
	m := f.serveMocks()
	v := f.created(m)
	gomock.InOrder(
		expectCaps(m, modifyCap),
		m.Controller.EXPECT().ControllerModifyVolume(gomock.Any(), csitest.ProtoEq(&csipb.ControllerModifyVolumeRequest{
			VolumeId: "pv-123", Secrets: map[string]string{"token": secretValue}, MutableParameters: map[string]string{"iops": "5000"},
		})).Return(&csipb.ControllerModifyVolumeResponse{}, nil),
	)
	got, err := f.ctl.Modify(context.Background(), "", "db", map[string]string{"iops": "5000"})
	require.NoError(t, err)
	require.Equal(t, v.ID, got.ID)
	require.Equal(t, map[string]string{"iops": "5000"}, got.MutableParameters, "the answer is the volume as recorded")
	held, err := f.cat.GetVolume(context.Background(), "", "db")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"iops": "5000"}, held.MutableParameters, "the catalog records what the plugin took")
}

// TestModifyIsRefusedWithoutModifyVolumeOrWithBadFieldsAndSendsNothing:
// a plugin without MODIFY_VOLUME gets no ControllerModifyVolume; no
// parameters, an empty key or an unknown volume are refused naming them.
func TestModifyIsRefusedWithoutModifyVolumeOrWithBadFieldsAndSendsNothing(t *testing.T) {
	f := newFixture(t, nil)
	m := f.serveMocks() // ControllerModifyVolume is never expected
	f.created(m)
	expectCaps(m, createDelete)
	_, err := f.ctl.Modify(context.Background(), "", "db", map[string]string{"iops": "5000"})
	require.ErrorIs(t, err, controller.ErrUnsupported)
	require.ErrorContains(t, err, `plugin "disk" does not advertise MODIFY_VOLUME`)
	for field, params := range map[string]map[string]string{
		"mutable_parameters must not be empty": nil,
		"mutable_parameters has an empty key":  {"": "x"},
	} {
		_, err := f.ctl.Modify(context.Background(), "", "db", params)
		require.ErrorIs(t, err, controller.ErrInvalidRequest)
		require.ErrorContains(t, err, field)
	}
	_, err = f.ctl.Modify(context.Background(), "", "", map[string]string{"iops": "1"})
	require.ErrorContains(t, err, "volume ID")
}

func TestModifyOnTheHostpathPluginIsStrict(t *testing.T) {
	f, _ := hostpathFixture(t)
	ctx := context.Background()
	_, err := f.ctl.Create(ctx, hostpathCreate("", "db"))
	require.NoError(t, err)
	_, err = f.ctl.Modify(ctx, "", "db", map[string]string{hostpath.MutableTier: "fast"})
	require.NoError(t, err)
	_, err = f.ctl.Modify(ctx, "", "db", map[string]string{"iops": "5000"})
	require.ErrorIs(t, err, csi.ErrInvalidArgument)
	require.ErrorContains(t, err, `unknown mutable parameter "iops"`)
	v, err := f.cat.GetVolume(ctx, "", "db")
	require.NoError(t, err)
	require.Equal(t, map[string]string{hostpath.MutableTier: "fast"}, v.MutableParameters, "what the plugin refused is not recorded")
}

// TestAModifyTheCatalogCouldNotRecordSendsNothing: a volume holding
// MaxMutableParameters keys takes a modify of those keys, but a new key
// would put it over the limit once merged, so the modify is refused, the
// field and the limit named, before any ControllerModifyVolume: the plugin
// never takes a change the catalog cannot record.
func TestAModifyTheCatalogCouldNotRecordSendsNothing(t *testing.T) {
	f := newFixture(t, nil)
	m := f.serveMocks()
	f.created(m)
	full := map[string]string{}
	for i := range model.MaxMutableParameters {
		full[fmt.Sprint("k", i)] = "v"
	}
	expectCaps(m, modifyCap)
	m.Controller.EXPECT().ControllerModifyVolume(gomock.Any(), gomock.Any()).Times(1).Return(&csipb.ControllerModifyVolumeResponse{}, nil)
	_, err := f.ctl.Modify(context.Background(), "", "db", full)
	require.NoError(t, err)

	_, err = f.ctl.Modify(context.Background(), "", "db", map[string]string{"one-more": "v"})
	require.ErrorIs(t, err, model.ErrInvalid)
	require.ErrorContains(t, err, fmt.Sprintf("mutable_parameters would hold %d keys, over the limit of %d", model.MaxMutableParameters+1, model.MaxMutableParameters))
	held, err := f.cat.GetVolume(context.Background(), "", "db")
	require.NoError(t, err)
	require.Equal(t, full, held.MutableParameters, "nothing changed")
}
