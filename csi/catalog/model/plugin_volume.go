package model

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/plugvisor/plugvisor/messages"
)

// This file holds what a volume knows of itself on the plugin's side: the
// plugin's ID for it, its size, the parameters, secrets, context and mount
// options that go with every RPC, and the marker of a delete under way.

// MaxExternalIDBytes bounds a plugin's volume ID. The CSI spec asks plugins
// to keep IDs short; this limit only keeps a hostile answer out of the store.
const MaxExternalIDBytes = 1024

// MaxMutableParameters bounds the mutable parameters a volume keeps, all
// modifies together: a plugin's knobs are few, and the record stays small.
const MaxMutableParameters = 256

// MountOptions say how a file-system volume is mounted: the file system to
// ask the plugin for, and the mount flags to pass it. A block-device volume
// has none.
type MountOptions struct {
	// FSType is the file system type, e.g. "ext4"; empty lets the plugin
	// choose.
	FSType string
	// MountFlags are passed to the plugin as they are, e.g. "noatime".
	MountFlags []string
}

// Copy returns a copy of o that shares nothing with it; nil for nil.
func (o *MountOptions) Copy() *MountOptions {
	if o == nil {
		return nil
	}
	return &MountOptions{FSType: o.FSType, MountFlags: slices.Clone(o.MountFlags)}
}

// Equal reports whether o and p say the same; nil equals an empty value.
func (o *MountOptions) Equal(p *MountOptions) bool {
	return o.fsType() == p.fsType() && slices.Equal(o.flags(), p.flags())
}

func (o *MountOptions) fsType() string {
	if o == nil {
		return ""
	}
	return o.FSType
}

func (o *MountOptions) flags() []string {
	if o == nil || len(o.MountFlags) == 0 {
		return nil
	}
	return o.MountFlags
}

// Redacted is what every text or JSON form of a secret value shows.
const Redacted = "[redacted]"

// Secrets are the CSI secrets of a volume: key to value. Every way to print
// them (fmt verbs, String, JSON, slog) shows the keys and hides the values,
// so that a volume logged or encoded by mistake leaks nothing. Code that
// must send the values to a plugin reads the map itself.
type Secrets map[string]string

// Keys returns the secrets' keys, sorted.
func (s Secrets) Keys() []string { return slices.Sorted(maps.Keys(s)) }

// String shows the keys only: map[key:[redacted] ...].
func (s Secrets) String() string {
	parts := make([]string, 0, len(s))
	for _, k := range s.Keys() {
		parts = append(parts, k+":"+Redacted)
	}
	return "map[" + strings.Join(parts, " ") + "]"
}

// Format makes every fmt verb print String, so %v, %+v, %#v and %s of the
// secrets, or of a struct that holds them, never show a value.
func (s Secrets) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(s.String())) }

// GoString is String, for %#v through interfaces that ask for it.
func (s Secrets) GoString() string { return s.String() }

// MarshalJSON encodes the keys with redacted values.
func (s Secrets) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range s.Keys() {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:%q", k, Redacted)
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}

// LogValue makes slog show String.
func (s Secrets) LogValue() slog.Value { return slog.StringValue(s.String()) }

// PluginVolumeID is the ID the plugin knows the volume by: ExternalID, or
// the volume's own ID when it has none.
func (v *CSIVolume) PluginVolumeID() string {
	if v.ExternalID != "" {
		return v.ExternalID
	}
	return v.ID
}

// AllClaims returns the claims of v, read, write, then past, each set
// sorted by alloc.
func (v *CSIVolume) AllClaims() []*Claim {
	var out []*Claim
	for _, m := range []map[string]*Claim{v.ReadClaims, v.WriteClaims, v.PastClaims} {
		for _, alloc := range slices.Sorted(maps.Keys(m)) {
			out = append(out, m[alloc])
		}
	}
	return out
}

// Claimants returns, sorted, the allocs with any claim on v: held, or on
// its way to being freed.
func (v *CSIVolume) Claimants() []string {
	set := map[string]bool{}
	for _, m := range []map[string]*Claim{v.ReadClaims, v.WriteClaims, v.PastClaims} {
		for alloc := range m {
			set[alloc] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// copyPluginSide deep-copies into out the plugin-side fields of v.
func copyPluginSide(out, v *CSIVolume) {
	out.Parameters = maps.Clone(v.Parameters)
	out.MutableParameters = maps.Clone(v.MutableParameters)
	out.Secrets = maps.Clone(v.Secrets)
	out.Context = maps.Clone(v.Context)
	out.MountOptions = v.MountOptions.Copy()
	out.RequestedTopologies = copyTopologies(v.RequestedTopologies)
}

// equalPluginSide reports whether v and o agree on the plugin-side fields
// that describe the volume (Deleting is state and is not compared). Empty
// and nil maps are equal; an empty ExternalID equals the volume's ID.
func (v *CSIVolume) equalPluginSide(o *CSIVolume) bool {
	return v.PluginVolumeID() == o.PluginVolumeID() &&
		v.CapacityBytes == o.CapacityBytes &&
		v.Created == o.Created &&
		maps.Equal(v.Parameters, o.Parameters) &&
		maps.Equal(v.Secrets, o.Secrets) &&
		maps.Equal(v.Context, o.Context) &&
		v.MountOptions.Equal(o.MountOptions) &&
		topologySetsEqual(v.RequestedTopologies, o.RequestedTopologies)
}

// checkPluginSide reports through bad what is wrong with the plugin-side
// fields of v. No message carries a secret's value.
func (v *CSIVolume) checkPluginSide(bad func(string, ...any)) {
	if v.ExternalID != "" {
		if err := checkExternalID(v.ExternalID); err != "" {
			bad("external ID %s", err)
		}
	}

	if v.CapacityBytes < 0 {
		bad("capacity %d bytes is negative", v.CapacityBytes)
	}
	if n := len(v.MutableParameters); n > MaxMutableParameters {
		bad("%d mutable parameters, over the limit of %d", n, MaxMutableParameters)
	}
	for name, m := range map[string]map[string]string{"parameter": v.Parameters, "mutable parameter": v.MutableParameters, "secret": v.Secrets, "context": v.Context} {
		if _, ok := m[""]; ok {
			bad("a %s has an empty key", name)
		}
	}
	if o := v.MountOptions; o != nil {
		if v.AttachmentMode == AttachmentModeBlockDevice && (o.FSType != "" || len(o.MountFlags) > 0) {
			bad("a %s volume takes no fs type or mount flags", AttachmentModeBlockDevice)
		}
		if strings.ContainsFunc(o.FSType, func(r rune) bool {
			return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '.' && r != '_' && r != '-'
		}) {
			bad("fs type %q may hold only letters, digits, '.', '_' and '-'", o.FSType)
		}
		for i, f := range o.MountFlags {
			if f == "" || strings.ContainsFunc(f, unicode.IsControl) {
				bad("mount flag %d (%q) is empty or holds a control character", i, f)
			}
		}
	}
	for i, t := range v.RequestedTopologies {
		if t == nil {
			bad("requested topology %d is nil", i)
		} else if _, ok := t.Segments[""]; ok {
			bad("requested topology %d has a segment with an empty key", i)
		}
	}
}

// ValidateExternalID returns nil when id can be a plugin's ID of a volume or
// snapshot (at most MaxExternalIDBytes of UTF-8 without control
// characters), and an error matching ErrInvalidVolume otherwise.
func ValidateExternalID(id string) error {
	if err := checkExternalID(id); err != "" {
		return errorf(ErrInvalidVolume, "plugin ID %s", err)
	}
	return nil
}

// checkExternalID says what is wrong with a plugin's volume ID, or "".
func checkExternalID(id string) string {
	switch {
	case len(id) > MaxExternalIDBytes:
		return fmt.Sprintf("is %d bytes, more than %d", len(id), MaxExternalIDBytes)
	case !utf8.ValidString(id):
		return fmt.Sprintf("%q is not UTF-8", id)
	case strings.ContainsFunc(id, unicode.IsControl):
		return fmt.Sprintf("%q holds a control character", id)
	}
	return ""
}

func identity(s string) string { return s }

// pluginSideFromProto sets the plugin-side fields of v from m.
func pluginSideFromProto(v *CSIVolume, m *messages.CatalogVolume) {
	v.ExternalID, v.CapacityBytes = m.GetExternalId(), m.GetCapacityBytes()
	v.Parameters, v.Secrets, v.Context = mapTo(m.GetParameters(), identity), mapTo(m.GetSecrets(), identity), mapTo(m.GetContext(), identity)
	v.MutableParameters = mapTo(m.GetMutableParameters(), identity)
	v.MountOptions = mountOptionsFromProto(m.GetMountOptions())
	v.RequestedTopologies = topologiesFromProto(m.GetRequestedTopologies())
	v.Deleting, v.Created = m.GetDeleting(), m.GetCreated()
}

func mountOptionsToProto(o *MountOptions) *messages.CatalogMountOptions {
	if o == nil {
		return nil
	}
	return &messages.CatalogMountOptions{FsType: o.FSType, MountFlags: slices.Clone(o.MountFlags)}
}

func mountOptionsFromProto(m *messages.CatalogMountOptions) *MountOptions {
	if m == nil {
		return nil
	}
	return &MountOptions{FSType: m.GetFsType(), MountFlags: slices.Clone(m.GetMountFlags())}
}
