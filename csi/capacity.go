package csi

import (
	"context"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

// GetCapacity passes the request to the plugin's Controller service: the
// capacity available for new volumes of the request's capabilities,
// parameters and topology (GET_CAPACITY).
func (c *Client) GetCapacity(ctx context.Context, req *csipb.GetCapacityRequest) (*csipb.GetCapacityResponse, error) {
	return invoke(ctx, c, "GetCapacity", c.controller.GetCapacity, req)
}

// ControllerModifyVolume passes the request to the plugin's Controller
// service: it changes a volume's mutable parameters (MODIFY_VOLUME).
func (c *Client) ControllerModifyVolume(ctx context.Context, req *csipb.ControllerModifyVolumeRequest) (*csipb.ControllerModifyVolumeResponse, error) {
	return invoke(ctx, c, "ControllerModifyVolume", c.controller.ControllerModifyVolume, req)
}
