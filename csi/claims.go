package csi

import (
	"context"
	"errors"

	"github.com/plugvisor/plugvisor/csi/catalog"
)

// ErrClaimRefused is returned when the catalog refuses a claim (a second
// writer on a single-writer volume, say) or a release. Nothing changed.
var ErrClaimRefused = errors.New("claim refused")

// Usage is how an alloc uses a volume: read-only or read-write, with which
// attachment mode and access mode.
type Usage struct {
	ReadOnly       bool
	AttachmentMode catalog.AttachmentMode
	AccessMode     catalog.AccessMode
}

// ClaimRequest is one alloc's claim on a volume.
type ClaimRequest struct {
	Plugin    string
	Namespace string
	VolumeID  string
	AllocID   string
	Usage     Usage
}

// Mode is the claim mode of r: read for a read-only usage, write otherwise.
func (r ClaimRequest) Mode() catalog.ClaimMode {
	if r.Usage.ReadOnly {
		return catalog.ClaimModeRead
	}
	return catalog.ClaimModeWrite
}

// Claimer decides whether an alloc may claim a volume, and hears when it
// lets go. The catalog implements it. A refusal wraps ErrClaimRefused.
type Claimer interface {
	Claim(ctx context.Context, req ClaimRequest) error
	Release(ctx context.Context, req ClaimRequest) error
}
