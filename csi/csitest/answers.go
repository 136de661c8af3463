package csitest

import csipb "github.com/container-storage-interface/spec/lib/go/csi"

// Answers a test plugin gives to the capability RPCs, built from the
// capabilities it should offer.

// each wraps every value.
func each[T, C any](values []T, wrap func(T) C) []C {
	out := make([]C, 0, len(values))
	for _, v := range values {
		out = append(out, wrap(v))
	}
	return out
}

// PluginCapabilities is a GetPluginCapabilities answer offering services and
// volume expansions.
func PluginCapabilities(services []csipb.PluginCapability_Service_Type, expansions []csipb.PluginCapability_VolumeExpansion_Type) *csipb.GetPluginCapabilitiesResponse {
	return &csipb.GetPluginCapabilitiesResponse{Capabilities: append(
		each(services, func(s csipb.PluginCapability_Service_Type) *csipb.PluginCapability {
			return &csipb.PluginCapability{Type: &csipb.PluginCapability_Service_{Service: &csipb.PluginCapability_Service{Type: s}}}
		}),
		each(expansions, func(e csipb.PluginCapability_VolumeExpansion_Type) *csipb.PluginCapability {
			return &csipb.PluginCapability{Type: &csipb.PluginCapability_VolumeExpansion_{VolumeExpansion: &csipb.PluginCapability_VolumeExpansion{Type: e}}}
		})...,
	)}
}

// ControllerCapabilities is a ControllerGetCapabilities answer offering rpcs.
func ControllerCapabilities(rpcs ...csipb.ControllerServiceCapability_RPC_Type) *csipb.ControllerGetCapabilitiesResponse {
	return &csipb.ControllerGetCapabilitiesResponse{Capabilities: each(rpcs,
		func(r csipb.ControllerServiceCapability_RPC_Type) *csipb.ControllerServiceCapability {
			return &csipb.ControllerServiceCapability{Type: &csipb.ControllerServiceCapability_Rpc{Rpc: &csipb.ControllerServiceCapability_RPC{Type: r}}}
		})}
}

// NodeCapabilities is a NodeGetCapabilities answer offering rpcs.
func NodeCapabilities(rpcs ...csipb.NodeServiceCapability_RPC_Type) *csipb.NodeGetCapabilitiesResponse {
	return &csipb.NodeGetCapabilitiesResponse{Capabilities: each(rpcs,
		func(r csipb.NodeServiceCapability_RPC_Type) *csipb.NodeServiceCapability {
			return &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{Type: r}}}
		})}
}
