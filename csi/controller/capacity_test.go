package controller_test

import (
	"context"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"go.uber.org/mock/gomock"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/controller"
	"github.com/plugvisor/plugvisor/csi/csitest"
	"github.com/plugvisor/plugvisor/csi/hostpath"
)

const capacityCap = csipb.ControllerServiceCapability_RPC_GET_CAPACITY

func capacityRequest() controller.CapacityRequest {
	return controller.CapacityRequest{
		PluginID: plugin,
		Capabilities: []controller.Capability{{AccessMode: model.AccessModeSingleNodeWriter, AttachmentMode: model.AttachmentModeFileSystem},
			{AccessMode: model.AccessModeSingleNodeReader, AttachmentMode: model.AttachmentModeBlockDevice}},
		Parameters: map[string]string{"tier": "fast"},
		Topology:   &model.Topology{Segments: map[string]string{"zone": "a"}},
	}
}

func TestCapacitySendsTheExactGetCapacityAndReturnsItsAnswer(t *testing.T) {
	f := newFixture(t, nil)
	m := f.serveMocks()
	want := &csipb.GetCapacityRequest{
		VolumeCapabilities: []*csipb.VolumeCapability{
			model.VolumeCapability(model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem, nil),
			model.VolumeCapability(model.AccessModeSingleNodeReader, model.AttachmentModeBlockDevice, nil),
		},
		Parameters:         map[string]string{"tier": "fast"},
		AccessibleTopology: &csipb.Topology{Segments: map[string]string{"zone": "a"}},
	}
	gomock.InOrder(
		expectCaps(m, capacityCap),
		m.Controller.EXPECT().GetCapacity(gomock.Any(), csitest.ProtoEq(want)).Return(&csipb.GetCapacityResponse{
			AvailableCapacity: 5 << 30, MaximumVolumeSize: wrapperspb.Int64(1 << 30)}, nil),
	)
	got, err := f.ctl.Capacity(context.Background(), capacityRequest())
	require.NoError(t, err)
	require.Equal(t, int64(5<<30), got.AvailableBytes)
	require.Equal(t, int64(1<<30), *got.MaximumVolumeSize)
	require.Nil(t, got.MinimumVolumeSize, "the plugin did not say")
}

// TestCapacityIsRefusedWithoutGetCapacityOrWithBadFieldsAndSendsNoGetCapacity:
// a plugin that does not advertise GET_CAPACITY is asked nothing more;
// bad fields are refused before any RPC, each naming its field.
func TestCapacityIsRefusedWithoutGetCapacityOrWithBadFieldsAndSendsNoGetCapacity(t *testing.T) {
	f := newFixture(t, nil)
	m := f.serveMocks() // GetCapacity is never expected
	expectCaps(m, createDelete)
	_, err := f.ctl.Capacity(context.Background(), capacityRequest())
	require.ErrorIs(t, err, controller.ErrUnsupported)
	require.ErrorContains(t, err, `plugin "disk" does not advertise GET_CAPACITY`)

	for field, change := range map[string]func(*controller.CapacityRequest){
		"plugin_id":                       func(r *controller.CapacityRequest) { r.PluginID = "" },
		"capabilities[1].access_mode":     func(r *controller.CapacityRequest) { r.Capabilities[1].AccessMode = "everyone" },
		"capabilities[0].attachment_mode": func(r *controller.CapacityRequest) { r.Capabilities[0].AttachmentMode = "floppy" },
		"parameters":                      func(r *controller.CapacityRequest) { r.Parameters[""] = "x" },
		"topology has no segments":        func(r *controller.CapacityRequest) { r.Topology.Segments = nil },
		"topology segment":                func(r *controller.CapacityRequest) { r.Topology.Segments["bad\nkey"] = "x" },
	} {
		req := capacityRequest()
		change(&req)
		_, err := f.ctl.Capacity(context.Background(), req)
		require.ErrorIs(t, err, controller.ErrInvalidRequest, field)
		require.ErrorContains(t, err, field)
	}
}

func TestCapacityOfTheHostpathPluginIsTheRoomUnderItsRoot(t *testing.T) {
	f, _ := hostpathFixture(t)
	req := controller.CapacityRequest{PluginID: "hostpath",
		Capabilities: []controller.Capability{{AccessMode: model.AccessModeSingleNodeWriter, AttachmentMode: model.AttachmentModeFileSystem}},
		Topology:     &model.Topology{Segments: map[string]string{hostpath.TopologyKey: "node-1"}}}
	got, err := f.ctl.Capacity(context.Background(), req)
	require.NoError(t, err)
	require.Positive(t, got.AvailableBytes)
	req.Capabilities[0].AccessMode = model.AccessModeMultiNodeMultiWriter
	got, err = f.ctl.Capacity(context.Background(), req)
	require.NoError(t, err)
	require.Zero(t, got.AvailableBytes, "the plugin has no room for a volume it cannot make")
}
