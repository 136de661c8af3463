package hostpath

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// Mutable parameters the driver takes, in CreateVolume and
// ControllerModifyVolume: any other key is InvalidArgument.
const (
	// MutableTier is the volume's tier: "standard" or "fast".
	MutableTier = "tier"
	// MutableLabel is a free label of at most 64 bytes.
	MutableLabel = "label"
)

// checkMutable refuses, naming the key, a mutable parameter the driver
// does not take or a value it cannot have.
func checkMutable(params map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(params)) {
		v := params[k]
		switch k {
		case MutableTier:
			if v != "standard" && v != "fast" {
				return fmt.Errorf("mutable parameter %s is %q: it is standard or fast", k, v)
			}
		case MutableLabel:
			if len(v) > 64 || strings.ContainsFunc(v, func(r rune) bool { return r < ' ' || r == 0x7f }) {
				return fmt.Errorf("mutable parameter %s must be at most 64 printable bytes", k)
			}
		default:
			return fmt.Errorf("unknown mutable parameter %q: this driver takes %s and %s", k, MutableTier, MutableLabel)
		}
	}
	return nil
}

// ControllerModifyVolume sets the volume's mutable parameters (those given
// replace their old values; the others stay; none changes nothing, as
// csi-sanity expects). An unknown key or a bad value is InvalidArgument;
// an unknown volume NotFound.
func (s *controllerServer) ControllerModifyVolume(_ context.Context, req *csi.ControllerModifyVolumeRequest) (*csi.ControllerModifyVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := checkID("volume", id); err != nil {
		return nil, invalidArgument(err)
	}
	if err := checkMutable(req.GetMutableParameters()); err != nil {
		return nil, invalidArgument(err)
	}
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	rec, err := d.requireVolumeLocked(id)
	if err != nil {
		return nil, err
	}
	if rec.MutableParameters == nil {
		rec.MutableParameters = map[string]string{}
	}
	if len(req.GetMutableParameters()) == 0 {
		return &csi.ControllerModifyVolumeResponse{}, nil
	}
	maps.Copy(rec.MutableParameters, req.GetMutableParameters())
	if err := writeJSON(d.volumeFile(id), rec); err != nil {
		return nil, internal(err)
	}
	d.log.Info("hostpath: modified volume", "volume_id", id, "mutable_parameters", rec.MutableParameters)
	return &csi.ControllerModifyVolumeResponse{}, nil
}

// MutableParameters returns the volume's mutable parameters, as recorded.
func (d *Driver) MutableParameters(id string) (map[string]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	rec, err := d.requireVolumeLocked(id)
	return rec.MutableParameters, err
}
