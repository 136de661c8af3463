package hostpath

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// GetCapacity answers the bytes available under the driver's root (statfs),
// where new volumes go, as the largest volume it can make too. Capabilities
// it cannot serve (block, multi-node), or a topology that is not this
// node's, have no capacity: 0. A malformed capability (no access type or
// mode) is InvalidArgument.
func (s *controllerServer) GetCapacity(_ context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	for _, c := range req.GetVolumeCapabilities() {
		if err := checkCapability(c); errors.Is(err, ErrUnsupportedCapability) {
			return &csi.GetCapacityResponse{}, nil
		} else if err != nil {
			return nil, invalidArgument(err)
		}
	}
	if t := req.GetAccessibleTopology(); t != nil && t.GetSegments()[TopologyKey] != s.d.cfg.NodeID {
		return &csi.GetCapacityResponse{}, nil
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(s.d.cfg.Root, &st); err != nil {
		return nil, internal(fmt.Errorf("statfs %s: %w", s.d.cfg.Root, err))
	}
	available := int64(st.Bavail) * int64(st.Bsize)
	return &csi.GetCapacityResponse{AvailableCapacity: available, MaximumVolumeSize: wrapperspb.Int64(available)}, nil
}
