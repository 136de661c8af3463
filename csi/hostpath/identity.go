package hostpath

import (
	"context"
	"os"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// identityServer serves the CSI Identity service.
type identityServer struct {
	csi.UnimplementedIdentityServer
	d *Driver
}

// GetPluginInfo reports the configured name and version, and the mode in
// the manifest.
func (s *identityServer) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{
		Name:          s.d.cfg.Name,
		VendorVersion: s.d.cfg.Version,
		Manifest:      map[string]string{"mode": string(s.d.cfg.Mode)},
	}, nil
}

// GetPluginCapabilities advertises the controller service (when this driver
// serves it), volume accessibility constraints (with Config.Topology) and
// online volume expansion (a volume grows while published).
func (s *identityServer) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	var services []csi.PluginCapability_Service_Type
	if s.d.cfg.Topology {
		services = append(services, csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS)
	}
	if s.d.cfg.Mode.controller() {
		services = append(services, csi.PluginCapability_Service_CONTROLLER_SERVICE)
	}
	caps := capabilities(func(t csi.PluginCapability_Service_Type) *csi.PluginCapability {
		return &csi.PluginCapability{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: t}}}
	}, services...)
	caps = append(caps, &csi.PluginCapability{Type: &csi.PluginCapability_VolumeExpansion_{
		VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: csi.PluginCapability_VolumeExpansion_ONLINE}}})
	return &csi.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

// Probe reports ready while the root directory is reachable, and
// FailedPrecondition otherwise.
func (s *identityServer) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	if _, err := os.Stat(s.d.volumesDir()); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "hostpath: root is not usable: %v", err)
	}
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}

// capabilities wraps each capability type into its message with wrap.
func capabilities[T, C any](wrap func(T) *C, types ...T) []*C {
	caps := make([]*C, 0, len(types))
	for _, t := range types {
		caps = append(caps, wrap(t))
	}
	return caps
}
