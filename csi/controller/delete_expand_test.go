package controller_test

import (
	"context"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"go.uber.org/mock/gomock"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/controller"
	"github.com/plugvisor/plugvisor/csi/csitest"
)

func TestDeleteMarksDeletesAndDeregisters(t *testing.T) {
	for name, answer := range map[string]error{
		"the plugin deletes it":                     nil,
		"a volume the plugin does not know is done": status.Error(codes.NotFound, "no such volume"),
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, nil)
			m := f.serveMocks()
			f.created(m)
			gomock.InOrder(
				expectCaps(m, createDelete),
				m.Controller.EXPECT().DeleteVolume(gomock.Any(), csitest.ProtoEq(&csipb.DeleteVolumeRequest{
					VolumeId: "pv-123", Secrets: map[string]string{"token": secretValue},
				})).Return(&csipb.DeleteVolumeResponse{}, answer),
			)
			require.NoError(t, f.ctl.Delete(context.Background(), "", "db"))
			require.Empty(t, f.volumes())
		})
	}
}

func TestDeleteIsRefusedWhileClaimedAndSendsNothing(t *testing.T) {
	f := newFixture(t, nil)
	m := f.serveMocks()
	f.created(m)
	f.healthy(plugin)
	require.NoError(t, f.cat.Claim(context.Background(), csi.ClaimRequest{VolumeID: "db", AllocID: "web-1"}))
	err := f.ctl.Delete(context.Background(), "", "db")
	require.ErrorIs(t, err, model.ErrVolumeInUse)
	require.Contains(t, err.Error(), "claimed by allocs web-1")
	v, err := f.cat.GetVolume(context.Background(), "", "db")
	require.NoError(t, err)
	require.False(t, v.Deleting, "nothing was marked")
}

func TestADeleteThatFailsStaysDeletingAndFinishesWhenRunAgain(t *testing.T) {
	f := newFixture(t, nil)
	m := f.serveMocks()
	f.created(m)
	f.healthy(plugin)
	gomock.InOrder(
		expectCaps(m, createDelete),
		m.Controller.EXPECT().DeleteVolume(gomock.Any(), gomock.Any()).Return(nil, status.Error(codes.Unavailable, "backend down")),
		expectCaps(m, createDelete),
		m.Controller.EXPECT().DeleteVolume(gomock.Any(), gomock.Any()).Return(&csipb.DeleteVolumeResponse{}, nil),
	)
	err := f.ctl.Delete(context.Background(), "", "db")
	require.ErrorIs(t, err, csi.ErrUnavailable)
	require.Contains(t, err.Error(), "run the delete again")
	v, err := f.cat.GetVolume(context.Background(), "", "db")
	require.NoError(t, err)
	require.True(t, v.Deleting)
	require.ErrorIs(t, f.cat.Claim(context.Background(), csi.ClaimRequest{VolumeID: "db", AllocID: "web-1"}), model.ErrVolumeDeleting)

	require.NoError(t, f.ctl.Delete(context.Background(), "", "db"))
	require.Empty(t, f.volumes())
}

func TestExpandRecordsTheCapacityAndAsksTheNodesWhenTheyMust(t *testing.T) {
	f := newFixture(t, nil)
	m := f.serveMocks()
	f.created(m)
	gomock.InOrder(
		expectCaps(m, expandCap),
		m.Controller.EXPECT().ControllerExpandVolume(gomock.Any(), csitest.ProtoEq(&csipb.ControllerExpandVolumeRequest{
			VolumeId:      "pv-123",
			CapacityRange: &csipb.CapacityRange{RequiredBytes: 8 << 20},
			Secrets:       map[string]string{"token": secretValue},
			VolumeCapability: &csipb.VolumeCapability{
				AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
				AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: "ext4", MountFlags: []string{"noatime"}}},
			},
		})).Return(&csipb.ControllerExpandVolumeResponse{CapacityBytes: 8 << 20, NodeExpansionRequired: true}, nil),
	)
	res, err := f.ctl.Expand(context.Background(), "", "db", 8<<20, 0)
	require.NoError(t, err)
	require.True(t, res.NodeExpansionRequired)
	require.True(t, res.NodeExpanded)
	require.Equal(t, int64(8<<20), res.Volume.CapacityBytes)
	require.Equal(t, []int64{8 << 20}, f.expand.calls)
	v, err := f.cat.GetVolume(context.Background(), "", "db")
	require.NoError(t, err)
	require.Equal(t, int64(8<<20), v.CapacityBytes)
}

func TestExpandIsRefusedWhenThePluginDoesNotAdvertiseIt(t *testing.T) {
	f := newFixture(t, nil)
	m := f.serveMocks()
	before := f.created(m)
	expectCaps(m, createDelete)
	_, err := f.ctl.Expand(context.Background(), "", "db", 8<<20, 0)
	require.ErrorIs(t, err, controller.ErrUnsupported)
	require.Contains(t, err.Error(), "EXPAND_VOLUME")
	require.Equal(t, []*model.CSIVolume{before}, f.volumes())
}
