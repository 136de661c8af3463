package model

import (
	"math"
	"slices"
	"strings"
)

// AccessMode says how many nodes may use a volume at once and whether any of
// them may write. The values are the CSI access modes spelled as Nomad spells
// them.
type AccessMode string

// The access modes.
const (
	// AccessModeSingleNodeReader lets allocs on one node read the volume.
	AccessModeSingleNodeReader AccessMode = "single-node-reader-only"
	// AccessModeSingleNodeWriter lets allocs on one node read the volume and
	// one of them write it.
	AccessModeSingleNodeWriter AccessMode = "single-node-writer"
	// AccessModeMultiNodeReader lets allocs on any nodes read the volume.
	AccessModeMultiNodeReader AccessMode = "multi-node-reader-only"
	// AccessModeMultiNodeSingleWriter lets allocs on any nodes read the volume
	// and one of them write it.
	AccessModeMultiNodeSingleWriter AccessMode = "multi-node-single-writer"
	// AccessModeMultiNodeMultiWriter lets allocs on any nodes read and write
	// the volume.
	AccessModeMultiNodeMultiWriter AccessMode = "multi-node-multi-writer"
)

// AccessModes returns every access mode, in the order of the constants.
func AccessModes() []AccessMode {
	return []AccessMode{
		AccessModeSingleNodeReader,
		AccessModeSingleNodeWriter,
		AccessModeMultiNodeReader,
		AccessModeMultiNodeSingleWriter,
		AccessModeMultiNodeMultiWriter,
	}
}

// ParseAccessMode returns the access mode spelled s, or an error matching
// ErrUnknownAccessMode that lists the valid spellings.
func ParseAccessMode(s string) (AccessMode, error) {
	return parseEnum(s, AccessMode.check)
}

// Validate returns nil for one of the AccessMode constants and an error
// matching ErrUnknownAccessMode for anything else, the empty string included.
func (m AccessMode) Validate() error { return m.check() }

func (m AccessMode) check() error {
	return checkEnum(m, AccessModes(), "access mode", ErrUnknownAccessMode)
}

// ReadOnly reports whether m refuses every writer. An unknown mode is
// read-only.
func (m AccessMode) ReadOnly() bool { return m.MaxWriters() == 0 }

// SingleNode reports whether m confines all claims to one node.
func (m AccessMode) SingleNode() bool {
	return m == AccessModeSingleNodeReader || m == AccessModeSingleNodeWriter
}

// MaxWriters returns how many write claims m allows at once: 0 for the
// read-only modes (and unknown ones), 1 for the single-writer modes and
// math.MaxInt for AccessModeMultiNodeMultiWriter.
func (m AccessMode) MaxWriters() int {
	switch m {
	case AccessModeSingleNodeWriter, AccessModeMultiNodeSingleWriter:
		return 1
	case AccessModeMultiNodeMultiWriter:
		return math.MaxInt
	default:
		return 0
	}
}

// AttachmentMode says whether a volume is handed to allocs as a raw block
// device or as a mounted file system.
type AttachmentMode string

// The attachment modes.
const (
	// AttachmentModeBlockDevice attaches the volume as a block device.
	AttachmentModeBlockDevice AttachmentMode = "block-device"
	// AttachmentModeFileSystem mounts the volume as a file system.
	AttachmentModeFileSystem AttachmentMode = "file-system"
)

// AttachmentModes returns every attachment mode, in the order of the
// constants.
func AttachmentModes() []AttachmentMode {
	return []AttachmentMode{AttachmentModeBlockDevice, AttachmentModeFileSystem}
}

// ParseAttachmentMode returns the attachment mode spelled s, or an error
// matching ErrUnknownAttachmentMode that lists the valid spellings.
func ParseAttachmentMode(s string) (AttachmentMode, error) {
	return parseEnum(s, AttachmentMode.check)
}

// Validate returns nil for one of the AttachmentMode constants and an error
// matching ErrUnknownAttachmentMode for anything else, the empty string
// included.
func (m AttachmentMode) Validate() error { return m.check() }

func (m AttachmentMode) check() error {
	return checkEnum(m, AttachmentModes(), "attachment mode", ErrUnknownAttachmentMode)
}

// ClaimMode says whether a claim reads or writes its volume.
type ClaimMode string

// The claim modes.
const (
	// ClaimModeRead is a read-only claim.
	ClaimModeRead ClaimMode = "read"
	// ClaimModeWrite is a read-write claim.
	ClaimModeWrite ClaimMode = "write"
)

// Validate returns nil for ClaimModeRead and ClaimModeWrite and an error
// matching ErrUnknownClaimMode for anything else.
func (m ClaimMode) Validate() error { return m.check() }

func (m ClaimMode) check() error {
	return checkEnum(m, []ClaimMode{ClaimModeRead, ClaimModeWrite}, "claim mode", ErrUnknownClaimMode)
}

// ClaimState is where a claim stands in its life: taken, then released in
// steps until it is ready to be freed.
type ClaimState string

// The claim states.
const (
	// ClaimStateTaken is a claim in use by its alloc.
	ClaimStateTaken ClaimState = "taken"
	// ClaimStateUnpublishing is a claim whose alloc has stopped and whose
	// volume is being unpublished from the node.
	ClaimStateUnpublishing ClaimState = "unpublishing"
	// ClaimStateNodeDetached is a claim whose volume the node plugin has
	// unpublished.
	ClaimStateNodeDetached ClaimState = "node-detached"
	// ClaimStateControllerDetached is a claim whose volume the controller
	// plugin has detached as well.
	ClaimStateControllerDetached ClaimState = "controller-detached"
	// ClaimStateReadyToFree is a claim that can be forgotten: releasing with
	// it removes the claim.
	ClaimStateReadyToFree ClaimState = "ready-to-free"
)

// Validate returns nil for one of the ClaimState constants and an error
// matching ErrUnknownClaimState for anything else.
func (s ClaimState) Validate() error { return s.check() }

func (s ClaimState) check() error {
	return checkEnum(s, []ClaimState{
		ClaimStateTaken, ClaimStateUnpublishing, ClaimStateNodeDetached,
		ClaimStateControllerDetached, ClaimStateReadyToFree,
	}, "claim state", ErrUnknownClaimState)
}

// PluginType says which CSI services a plugin job runs.
type PluginType string

// The plugin types.
const (
	// PluginTypeController runs the controller service only.
	PluginTypeController PluginType = "controller"
	// PluginTypeNode runs the node service only.
	PluginTypeNode PluginType = "node"
	// PluginTypeMonolith runs both services.
	PluginTypeMonolith PluginType = "monolith"
)

// Validate returns nil for one of the PluginType constants and an error
// matching ErrUnknownPluginType for anything else.
func (t PluginType) Validate() error { return t.check() }

func (t PluginType) check() error {
	return checkEnum(t, []PluginType{PluginTypeController, PluginTypeNode, PluginTypeMonolith},
		"plugin type", ErrUnknownPluginType)
}

// runsController reports whether t runs the controller service.
func (t PluginType) runsController() bool {
	return t == PluginTypeController || t == PluginTypeMonolith
}

// runsNode reports whether t runs the node service.
func (t PluginType) runsNode() bool {
	return t == PluginTypeNode || t == PluginTypeMonolith
}

// checkEnum returns nil when v is one of all, and otherwise an error matching
// kind that names what v is and lists the valid values.
func checkEnum[T ~string](v T, all []T, what string, kind error) error {
	if slices.Contains(all, v) {
		return nil
	}
	names := make([]string, len(all))
	for i, a := range all {
		names[i] = string(a)
	}
	return errorf(kind, "unknown %s %q (want one of %s)", what, string(v), strings.Join(names, ", "))
}

// parseEnum converts s to T when check accepts it.
func parseEnum[T ~string](s string, check func(T) error) (T, error) {
	if err := check(T(s)); err != nil {
		return "", err
	}
	return T(s), nil
}
