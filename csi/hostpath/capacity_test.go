package hostpath_test

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/plugvisor/plugvisor/csi/hostpath"
)

// TestGetCapacityIsTheRootsRoomForCapabilitiesAndTopologyItServes: the
// bytes free under the root for what the driver can make, 0 for a block
// or multi-node capability or another node's topology, and
// InvalidArgument for a capability without an access mode.
func TestGetCapacityIsTheRootsRoomForCapabilitiesAndTopologyItServes(t *testing.T) {
	cfg := config(t)
	p := serve(t, cfg)
	here := &csi.Topology{Segments: map[string]string{hostpath.TopologyKey: cfg.NodeID}}
	resp, err := p.ctrl.GetCapacity(t.Context(), &csi.GetCapacityRequest{VolumeCapabilities: []*csi.VolumeCapability{writer}, AccessibleTopology: here})
	require.NoError(t, err)
	require.Positive(t, resp.GetAvailableCapacity())
	require.Equal(t, resp.GetAvailableCapacity(), resp.GetMaximumVolumeSize().GetValue())

	for name, req := range map[string]*csi.GetCapacityRequest{
		"block":        {VolumeCapabilities: []*csi.VolumeCapability{blockCap()}},
		"multi-node":   {VolumeCapabilities: []*csi.VolumeCapability{mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)}},
		"another node": {AccessibleTopology: &csi.Topology{Segments: map[string]string{hostpath.TopologyKey: "elsewhere"}}},
	} {
		resp, err := p.ctrl.GetCapacity(t.Context(), req)
		require.NoError(t, err, name)
		require.Zero(t, resp.GetAvailableCapacity(), name)
	}
	_, err = p.ctrl.GetCapacity(t.Context(), &csi.GetCapacityRequest{VolumeCapabilities: []*csi.VolumeCapability{{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}}}})
	requireCode(t, codes.InvalidArgument, err)
}
