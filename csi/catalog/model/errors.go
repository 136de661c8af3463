package model

import (
	"fmt"

	"github.com/plugvisor/plugvisor/errclass"
)

// Sentinel errors. Errors returned by this package match one or more of these
// with errors.Is; their messages carry the details (volume, alloc, node).
var (
	// ErrUnknownAccessMode is returned for an access mode that is not one of
	// the AccessMode constants.
	ErrUnknownAccessMode = errclass.New(errclass.Invalid, "unknown access mode")
	// ErrUnknownAttachmentMode is returned for an attachment mode that is not
	// one of the AttachmentMode constants.
	ErrUnknownAttachmentMode = errclass.New(errclass.Invalid, "unknown attachment mode")
	// ErrUnknownClaimMode is returned for a claim mode that is neither read nor
	// write.
	ErrUnknownClaimMode = errclass.New(errclass.Invalid, "unknown claim mode")
	// ErrUnknownClaimState is returned for a claim state that is not one of the
	// ClaimState constants.
	ErrUnknownClaimState = errclass.New(errclass.Invalid, "unknown claim state")
	// ErrUnknownPluginType is returned for a plugin type that is not one of the
	// PluginType constants.
	ErrUnknownPluginType = errclass.New(errclass.Invalid, "unknown plugin type")

	// ErrInvalidVolume is returned when a volume's own fields are wrong: by
	// CSIVolume.Validate, and by claim operations on such a volume.
	ErrInvalidVolume = errclass.New(errclass.Invalid, "invalid volume")
	// ErrInvalidClaim is returned when a claim is malformed or contradicts the
	// claim its alloc already holds (other node, other mode on release).
	ErrInvalidClaim = errclass.New(errclass.Invalid, "invalid claim")
	// ErrInvalidPlugin is returned for bad input to plugin operations: an
	// empty node ID, a missing or foreign fingerprint, a malformed job.
	ErrInvalidPlugin = errclass.New(errclass.Invalid, "invalid plugin input")
	// ErrPluginMismatch is returned when a volume's health is derived from a
	// plugin other than the volume's own.
	ErrPluginMismatch = errclass.New(errclass.Invalid, "plugin does not serve this volume")

	// ErrVolumeUnschedulable is returned when a new claim is refused because
	// the volume's plugin is not healthy enough or its resources are
	// exhausted.
	ErrVolumeUnschedulable = errclass.New(errclass.Conflict, "volume is not schedulable")
	// ErrWriteClaimRefused is returned when a write claim is made on a volume
	// whose access mode is read-only.
	ErrWriteClaimRefused = errclass.New(errclass.Conflict, "volume refuses write claims")
	// ErrVolumeMaxClaims is returned when a write claim is made on a volume
	// whose access mode allows no more writers than it already has.
	ErrVolumeMaxClaims = errclass.New(errclass.Conflict, "volume has no free write claim")
	// ErrNodeConflict is returned when a volume with a single-node access mode
	// is claimed on a node other than the one it is already claimed on.
	ErrNodeConflict = errclass.New(errclass.Conflict, "volume is claimed on another node")
	// ErrNodeVolumeLimit is returned when a claim would put more volumes of
	// a plugin on a node than the plugin's max_volumes_per_node there.
	ErrNodeVolumeLimit = errclass.New(errclass.Conflict, "node has no room for another volume of the plugin")
	// ErrTopologyMismatch is returned when a claim is made on a node that
	// stands in none of the topologies the volume can be reached from.
	ErrTopologyMismatch = errclass.New(errclass.Conflict, "node cannot reach the volume")
	// ErrClaimModeConflict is returned when an alloc that holds a read claim
	// asks for a write claim, or the other way round: it must release first.
	ErrClaimModeConflict = errclass.New(errclass.Conflict, "alloc holds a claim in the other mode")
	// ErrClaimReleasing is returned when an alloc whose claim is being
	// released asks for a claim again.
	ErrClaimReleasing = errclass.New(errclass.Conflict, "claim is being released")
	// ErrClaimNotFound is returned when a claim that is not held is released
	// with a state other than ClaimStateReadyToFree.
	ErrClaimNotFound = errclass.New(errclass.NotFound, "no such claim")

	// ErrInvalidAttachment is returned for a malformed attachment: no node,
	// no plugin node ID, an unknown state.
	ErrInvalidAttachment = errclass.New(errclass.Invalid, "invalid attachment")
	// ErrAttachRefused is returned when a node that holds no claim on a
	// volume records an attachment of it.
	ErrAttachRefused = errclass.New(errclass.Conflict, "attachment refused")
	// ErrAttachConflict is returned when a volume with a single-node access
	// mode is attached to a node while another node holds an attachment.
	ErrAttachConflict = errclass.New(errclass.Conflict, "volume is attached to another node")
	// ErrCapabilityConflict is returned when a claim chose a capability
	// whose attachment mode differs from the one the volume's claims use.
	ErrCapabilityConflict = errclass.New(errclass.Conflict, "claim's capability conflicts with the volume's claims")
)

// errorf returns an error that reads as the formatted detail and matches
// kind, whose class it has.
func errorf(kind error, format string, args ...any) error {
	return errclass.Also(fmt.Errorf(format, args...), kind)
}

// within puts err in a wider context: the result reads as the formatted
// context, a colon and err's text, and matches kind as well as what err
// matches.
func within(err, kind error, format string, args ...any) error {
	return errclass.Also(fmt.Errorf(format+": %w", append(args, err)...), kind)
}
