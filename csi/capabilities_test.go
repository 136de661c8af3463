package csi

import (
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
)

// byNumber adapts a flag method to raw enum numbers.
func byNumber[T ~int32](flag func(T) *bool) func(int32) *bool {
	return func(v int32) *bool { return flag(T(v)) }
}

func TestEveryCapabilityTheSpecNamesHasAFlagOfItsOwn(t *testing.T) {
	var pc PluginCapabilities
	var cc ControllerCapabilities
	var nc NodeCapabilities
	tests := []struct {
		name  string
		names map[int32]string // as the spec's Go enum names them
		flag  func(int32) *bool
	}{
		{"plugin services", csipb.PluginCapability_Service_Type_name, byNumber(pc.serviceFlag)},
		{"plugin volume expansion", csipb.PluginCapability_VolumeExpansion_Type_name, byNumber(pc.expansionFlag)},
		{"controller RPCs", controllerRPCNames, byNumber(cc.flag)},
		{"node RPCs", nodeRPCNames, byNumber(nc.flag)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seen := map[*bool]string{}
			for value, name := range tt.names {
				f := tt.flag(value)
				if value == 0 {
					require.Nil(t, f, "UNKNOWN must stay unknown")
					continue
				}
				require.NotNil(t, f, "%s (%d) has no flag", name, value)
				other, shared := seen[f] // compares the pointers, not what they point to
				require.False(t, shared, "%s shares a flag with %s", name, other)
				seen[f] = name
			}
		})
	}
}

func TestCapabilityEntriesOfAKindUnknownToTheSpecAreSkipped(t *testing.T) {
	// A oneof member added by a later spec decodes as an unset oneof.
	require.Equal(t, ControllerCapabilities{},
		controllerCapabilitiesFrom([]*csipb.ControllerServiceCapability{{}}))
	require.Equal(t, NodeCapabilities{},
		nodeCapabilitiesFrom([]*csipb.NodeServiceCapability{{}}))
	require.Equal(t, PluginCapabilities{},
		pluginCapabilitiesFrom([]*csipb.PluginCapability{{}}))
}

func TestVolumeConditionFromSpec112DriversIsReadAndNamed(t *testing.T) {
	cc := controllerCapabilitiesFrom([]*csipb.ControllerServiceCapability{controllerRPC(11), controllerRPC(18)})
	require.Equal(t, ControllerCapabilities{VolumeCondition: true, Unknown: []int32{18}}, cc)
	nc := nodeCapabilitiesFrom([]*csipb.NodeServiceCapability{nodeRPC(4)})
	require.Equal(t, NodeCapabilities{VolumeCondition: true}, nc)

	names := CapabilityNames(&PluginCapabilities{}, &cc, &nc)
	require.Equal(t, []string{"VOLUME_CONDITION"}, names.GetController())
	require.Equal(t, []string{"VOLUME_CONDITION"}, names.GetNode())
	require.Equal(t, []int32{18}, names.GetUnknown())
}

func controllerRPC(v csipb.ControllerServiceCapability_RPC_Type) *csipb.ControllerServiceCapability {
	return &csipb.ControllerServiceCapability{Type: &csipb.ControllerServiceCapability_Rpc{
		Rpc: &csipb.ControllerServiceCapability_RPC{Type: v}}}
}

func nodeRPC(v csipb.NodeServiceCapability_RPC_Type) *csipb.NodeServiceCapability {
	return &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{
		Rpc: &csipb.NodeServiceCapability_RPC{Type: v}}}
}
