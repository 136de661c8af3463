package csi

import (
	"fmt"
	"strings"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/errclass"
)

// The volume vocabulary that the volume manager (csi/volumes) and the
// catalog (csi/catalog) share: how an alloc uses a volume, the claim the
// volume manager asks for before it mounts, and the two sentinels both
// return. It lives here, below both, so that neither imports the other.

var (
	// ErrInvalidVolumeRequest is returned for a malformed mount or unmount:
	// an ID or namespace that cannot be a path segment, an unknown access or
	// attachment mode, bad mount options. Nothing changed.
	ErrInvalidVolumeRequest = errclass.New(errclass.Invalid, "invalid volume request")
	// ErrClaimRefused is returned when the catalog refuses the claim (a
	// second writer on a single-writer volume, say), or the alloc already
	// mounts the volume another way. No RPC was sent; nothing changed.
	// It is model.ErrClaimRefused, which the catalog's rules return.
	ErrClaimRefused = model.ErrClaimRefused
	// ErrFleetUnavailable is returned, in cluster mode, when etcd did not
	// answer within the request timeout, so a change was refused rather
	// than guessed. It is model.ErrFleetUnavailable.
	ErrFleetUnavailable = model.ErrFleetUnavailable
	// ErrVolumeLimit is returned when the catalog holds as many volumes as
	// it may (agent flag -max-volumes), so a new one is refused. It is
	// model.ErrVolumeLimit.
	ErrVolumeLimit = model.ErrVolumeLimit
)

// Usage is how an alloc uses a volume: read-only or read-write, with which
// attachment mode and access mode. A volume is staged once per usage, and
// its staging and target paths end in the usage's [Usage.String].
type Usage struct {
	ReadOnly       bool
	AttachmentMode model.AttachmentMode
	AccessMode     model.AccessMode
}

// String is the usage as one path segment, as Nomad spells it:
// "ro-file-system-single-node-reader-only", "rw-block-device-single-node-writer".
func (u Usage) String() string {
	rw := "rw"
	if u.ReadOnly {
		rw = "ro"
	}
	return rw + "-" + string(u.AttachmentMode) + "-" + string(u.AccessMode)
}

// Validate checks that u names a known attachment mode and access mode, and
// that a read-write usage does not ask for a read-only access mode. Each
// problem wraps [ErrInvalidVolumeRequest]; catalog's sentinels
// (model.ErrUnknownAccessMode, ...) stay in the chain.
func (u Usage) Validate() error {
	return InvalidVolumeRequest(u.Problems())
}

// Problems lists what is wrong with u, each a plain error; none when u is valid.
func (u Usage) Problems() []error {
	var problems []error
	if err := u.AttachmentMode.Validate(); err != nil {
		problems = append(problems, err)
	}
	if err := u.AccessMode.Validate(); err != nil {
		problems = append(problems, err)
	} else if !u.ReadOnly && u.AccessMode.ReadOnly() {
		problems = append(problems, fmt.Errorf("access mode %s is read-only: a mount with it must be read-only", u.AccessMode))
	}
	return problems
}

// InvalidVolumeRequest wraps problems, each kept in the chain, into one error
// matching ErrInvalidVolumeRequest; nil when there are none.
func InvalidVolumeRequest(problems []error) error {
	if len(problems) == 0 {
		return nil
	}
	format := "csi: %w: " + strings.Repeat("%w; ", len(problems)-1) + "%w"
	return fmt.Errorf(format, append([]any{ErrInvalidVolumeRequest}, errorsAsAny(problems)...)...)
}

func errorsAsAny(errs []error) []any {
	out := make([]any, len(errs))
	for i, e := range errs {
		out[i] = e
	}
	return out
}

// ClaimRequest is one alloc's claim on a volume, as the volume manager
// hands it to the catalog.
type ClaimRequest struct {
	Plugin    string
	Namespace string
	VolumeID  string
	AllocID   string
	Usage     Usage
}

// Mode is the claim mode of r: read for a read-only usage, write otherwise.
func (r ClaimRequest) Mode() model.ClaimMode {
	if r.Usage.ReadOnly {
		return model.ClaimModeRead
	}
	return model.ClaimModeWrite
}
