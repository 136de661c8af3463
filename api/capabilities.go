package api

import (
	"context"
	"fmt"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
)

// CapabilityJSON is one of a volume's capabilities: an access mode, an
// attachment mode and, for a file system, its type.
type CapabilityJSON struct {
	AccessMode     string `json:"access_mode"`
	AttachmentMode string `json:"attachment_mode"`
	FSType         string `json:"fs_type,omitempty"`
}

// capabilitiesJSON renders v's capabilities.
func capabilitiesJSON(v *model.CSIVolume) []CapabilityJSON {
	out := []CapabilityJSON{}
	for _, c := range v.Capabilities() {
		out = append(out, CapabilityJSON{AccessMode: string(c.AccessMode), AttachmentMode: string(c.AttachmentMode), FSType: c.FSType})
	}
	return out
}

// bodyCapabilities returns the capabilities a registration names: its
// capabilities list, or its access_mode and attachment_mode as the one
// capability. A mode that is not known is refused naming its field.
func bodyCapabilities(body VolumeBody) ([]model.RequestedCapability, error) {
	if len(body.Capabilities) == 0 {
		access, err := model.ParseAccessMode(body.AccessMode)
		if err != nil {
			return nil, fmt.Errorf("access_mode: %w", err)
		}
		attach, err := model.ParseAttachmentMode(body.AttachmentMode)
		if err != nil {
			return nil, fmt.Errorf("attachment_mode: %w", err)
		}
		return []model.RequestedCapability{{AccessMode: access, AttachmentMode: attach}}, nil
	}
	if body.AccessMode != "" || body.AttachmentMode != "" {
		return nil, fmt.Errorf("%w: capabilities and access_mode/attachment_mode both given: the first capability is the volume's modes; leave access_mode and attachment_mode out", errBadBody)
	}
	out := make([]model.RequestedCapability, len(body.Capabilities))
	for i, c := range body.Capabilities {
		access, err := model.ParseAccessMode(c.AccessMode)
		if err != nil {
			return nil, fmt.Errorf("capabilities[%d].access_mode: %w", i, err)
		}
		attach, err := model.ParseAttachmentMode(c.AttachmentMode)
		if err != nil {
			return nil, fmt.Errorf("capabilities[%d].attachment_mode: %w", i, err)
		}
		out[i] = model.RequestedCapability{AccessMode: access, AttachmentMode: attach, FSType: c.FSType}
	}
	return out, nil
}

// bodyUsage is how a claim or a mount means to use its volume: read-only
// or not, and the capability its access_mode and attachment_mode choose
// (either may be left out). A mode that is not known is refused naming its
// field.
func bodyUsage(body AllocBody) (csi.Usage, error) {
	use := csi.Usage{ReadOnly: body.ReadOnly}
	if body.AccessMode != "" {
		m, err := model.ParseAccessMode(body.AccessMode)
		if err != nil {
			return use, fmt.Errorf("access_mode: %w", err)
		}
		use.AccessMode = m
	}
	if body.AttachmentMode != "" {
		m, err := model.ParseAttachmentMode(body.AttachmentMode)
		if err != nil {
			return use, fmt.Errorf("attachment_mode: %w", err)
		}
		use.AttachmentMode = m
	}
	return use, nil
}

// validateCapabilities asks the plugin's controller to confirm v's
// capabilities before v is registered, when this agent runs controller
// operations (see controller.Controller.ValidateCapabilities).
func (s *Server) validateCapabilities(ctx context.Context, v *model.CSIVolume) error {
	if s.Controller == nil {
		return nil
	}
	return s.Controller.ValidateCapabilities(ctx, v)
}
