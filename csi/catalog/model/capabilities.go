package model

import (
	"fmt"
	"slices"
	"strings"
	"unicode"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/plugvisor/plugvisor/messages"
)

// RequestedCapability is one way a volume can be used, as Nomad's volume
// specification's capability block says it: an access mode, an attachment
// mode and, for a file system, its type. A volume registers with one or
// more; each claim chooses one.
type RequestedCapability struct {
	AccessMode     AccessMode
	AttachmentMode AttachmentMode
	// FSType is the file system of a file-system capability; empty means
	// the volume's MountOptions.FSType, or the plugin's default.
	FSType string
}

// String is c as the CLI spells it: "access=A,attachment=B[,fs=F]".
func (c RequestedCapability) String() string {
	s := "access=" + string(c.AccessMode) + ",attachment=" + string(c.AttachmentMode)
	if c.FSType != "" {
		s += ",fs=" + c.FSType
	}
	return s
}

// CapabilitySyntax is how the CLI and the API's queries spell one
// capability (RequestedCapability.String, ParseCapability).
const CapabilitySyntax = "access=MODE[,attachment=MODE][,fs=TYPE]"

// ParseCapability reads one capability as the CLI and the API's queries
// spell it, CapabilitySyntax: the attachment defaults to file-system. An
// unknown key or mode, a part that is not KEY=VALUE, a missing access and
// a bad fs type are refused with ErrInvalid naming the part and the syntax.
func ParseCapability(s string) (RequestedCapability, error) {
	c := RequestedCapability{AttachmentMode: AttachmentModeFileSystem}
	bad := func(format string, args ...any) (RequestedCapability, error) {
		return RequestedCapability{}, Refusef(ErrInvalid, "capability %q: "+format+" (the syntax is "+CapabilitySyntax+")", append([]any{s}, args...)...)
	}
	for _, part := range strings.Split(s, ",") {
		key, value, ok := strings.Cut(part, "=")
		if !ok || value == "" {
			return bad("%q is not KEY=VALUE", part)
		}
		var err error
		switch key {
		case "access":
			c.AccessMode, err = ParseAccessMode(value)
		case "attachment":
			c.AttachmentMode, err = ParseAttachmentMode(value)
		case "fs":
			c.FSType = value
		default:
			return bad("unknown key %q (keys: access, attachment, fs)", key)
		}
		if err != nil {
			return bad("%s: %v", key, err)
		}
	}
	if c.AccessMode == "" {
		return bad("access=MODE is required")
	}
	if problems := c.check(0); len(problems) > 0 {
		return bad("%s", strings.Replace(strings.TrimPrefix(problems[0], "capabilities[0]."), "fs_type", "fs", 1))
	}
	return c, nil
}

// same reports whether c and o are the same capability: the same access
// and attachment modes (a volume has at most one of each pair).
func (c RequestedCapability) same(o RequestedCapability) bool {
	return c.AccessMode == o.AccessMode && c.AttachmentMode == o.AttachmentMode
}

// check reports what is wrong with c, the capability at index i.
func (c RequestedCapability) check(i int) []string {
	var problems []string
	if err := c.AccessMode.check(); err != nil {
		problems = append(problems, fmt.Sprintf("capabilities[%d].access_mode: %s", i, err))
	}
	if err := c.AttachmentMode.check(); err != nil {
		problems = append(problems, fmt.Sprintf("capabilities[%d].attachment_mode: %s", i, err))
	}
	switch {
	case c.AttachmentMode == AttachmentModeBlockDevice && c.FSType != "":
		problems = append(problems, fmt.Sprintf("capabilities[%d].fs_type: a %s capability takes no fs type; leave it out", i, AttachmentModeBlockDevice))
	case !validFSType(c.FSType):
		problems = append(problems, fmt.Sprintf("capabilities[%d].fs_type %q may hold only letters, digits, '.', '_' and '-'", i, c.FSType))
	}
	return problems
}

func validFSType(s string) bool {
	return !strings.ContainsFunc(s, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '.' && r != '_' && r != '-'
	})
}

// Capabilities returns v's capabilities, a copy: RequestedCapabilities, or
// for a volume registered with one mode (a record written before volumes
// had several), the one of its AccessMode, AttachmentMode and fs type.
func (v *CSIVolume) Capabilities() []RequestedCapability {
	if len(v.RequestedCapabilities) > 0 {
		return slices.Clone(v.RequestedCapabilities)
	}
	return []RequestedCapability{{AccessMode: v.AccessMode, AttachmentMode: v.AttachmentMode, FSType: v.MountOptions.fsType()}}
}

// SetCapabilities gives v the capabilities caps (a copy) and makes the
// first v's AccessMode and AttachmentMode, the modes a claim that names
// none of a one-capability volume uses. Validate checks them.
func (v *CSIVolume) SetCapabilities(caps []RequestedCapability) {
	v.RequestedCapabilities = slices.Clone(caps)
	if len(caps) > 0 {
		v.AccessMode, v.AttachmentMode = caps[0].AccessMode, caps[0].AttachmentMode
	}
}

// checkCapabilities reports through bad what is wrong with v's
// RequestedCapabilities: a bad mode or fs type, a pair of modes twice, or
// a first capability that is not v's own modes.
func (v *CSIVolume) checkCapabilities(bad func(string, ...any)) {
	for i, c := range v.RequestedCapabilities {
		for _, p := range c.check(i) {
			bad("%s", p)
		}
		if j := slices.IndexFunc(v.RequestedCapabilities[:i], c.same); j >= 0 {
			bad("capabilities[%d] repeats capabilities[%d] (%s %s): name each pair of modes once", i, j, c.AccessMode, c.AttachmentMode)
		}
	}
	if caps := v.RequestedCapabilities; len(caps) > 0 && (caps[0].AccessMode != v.AccessMode || caps[0].AttachmentMode != v.AttachmentMode) {
		bad("capabilities[0] (%s %s) differs from the volume's access and attachment modes (%s %s)",
			caps[0].AccessMode, caps[0].AttachmentMode, v.AccessMode, v.AttachmentMode)
	}
}

// capabilityOf returns the capability claim c uses: its own modes, or the
// volume's where it names none (a claim written before volumes had
// several capabilities).
func (v *CSIVolume) capabilityOf(c *Claim) RequestedCapability {
	out := RequestedCapability{AccessMode: c.AccessMode, AttachmentMode: c.AttachmentMode}
	if out.AccessMode == "" {
		out.AccessMode = v.AccessMode
	}
	if out.AttachmentMode == "" {
		out.AttachmentMode = v.AttachmentMode
	}
	if i := slices.IndexFunc(v.Capabilities(), out.same); i >= 0 {
		out.FSType = v.Capabilities()[i].FSType
	}
	return out
}

// chooseCapability fills the modes of c, a new claim, with the one of v's
// capabilities it names: the only one that has the modes c names (both,
// one, or, on a volume with one capability, none). On a volume with one
// capability the claim keeps no modes (they are the volume's), as claims
// did before volumes had several. A claim that names no capability of v,
// or too little to choose one, is refused with ErrInvalidClaim naming the
// field and v's capabilities.
func (v *CSIVolume) chooseCapability(c *Claim) error {
	caps := v.Capabilities()
	var fit []RequestedCapability
	for _, cp := range caps {
		if (c.AccessMode == "" || c.AccessMode == cp.AccessMode) && (c.AttachmentMode == "" || c.AttachmentMode == cp.AttachmentMode) {
			fit = append(fit, cp)
		}
	}
	switch len(fit) {
	case 1:
		c.AccessMode, c.AttachmentMode = fit[0].AccessMode, fit[0].AttachmentMode
		if len(caps) == 1 {
			c.AccessMode, c.AttachmentMode = "", ""
		}
		return nil
	case 0:
		return v.errorf(ErrInvalidClaim, "has no capability %s: claim by alloc %s must name one of %s (access_mode, attachment_mode)",
			RequestedCapability{AccessMode: c.AccessMode, AttachmentMode: c.AttachmentMode}, c.AllocID, capabilitiesString(caps))
	default:
		return v.errorf(ErrInvalidClaim, "has %d capabilities that fit the claim by alloc %s: name one of %s with access_mode and attachment_mode",
			len(fit), c.AllocID, capabilitiesString(fit))
	}
}

// capabilityConflict refuses c when it chose another attachment mode than
// the claims v holds (a volume is used one way at a time, as in Nomad).
func (v *CSIVolume) capabilityConflict(c *Claim) error {
	for _, h := range v.heldClaims() {
		if got, want := v.capabilityOf(h).AttachmentMode, v.capabilityOf(c).AttachmentMode; got != want {
			return v.errorf(ErrCapabilityConflict, "is held as %s by alloc %s: claim by alloc %s as %s refused; choose a %s capability or wait for the volume to be released",
				got, h.AllocID, c.AllocID, want, got)
		}
	}
	return nil
}

// writerLimit returns the fewest writers that v's write claims, with
// extra's mode added when extra is not nil, allow together, and the access
// mode that sets it: each writer's capability caps the writers of the
// volume, whichever capability the others chose.
func (v *CSIVolume) writerLimit(extra *AccessMode) (int, AccessMode) {
	limit, by := -1, v.AccessMode
	consider := func(m AccessMode) {
		if n := m.MaxWriters(); limit < 0 || n < limit {
			limit, by = n, m
		}
	}
	for _, w := range v.WriteClaims {
		consider(v.capabilityOf(w).AccessMode)
	}
	if extra != nil {
		consider(*extra)
	}
	if limit < 0 {
		return v.AccessMode.MaxWriters(), v.AccessMode
	}
	return limit, by
}

// singleNodeHeld returns a claim v holds whose capability confines the
// volume to one node, or nil.
func (v *CSIVolume) singleNodeHeld() *Claim {
	for _, h := range v.heldClaims() {
		if v.capabilityOf(h).AccessMode.SingleNode() {
			return h
		}
	}
	return nil
}

// heldClaims returns v's read and write claims.
func (v *CSIVolume) heldClaims() []*Claim {
	out := make([]*Claim, 0, len(v.ReadClaims)+len(v.WriteClaims))
	for _, m := range []map[string]*Claim{v.ReadClaims, v.WriteClaims} {
		for _, c := range m {
			if c != nil {
				out = append(out, c)
			}
		}
	}
	return out
}

func capabilitiesString(caps []RequestedCapability) string {
	parts := make([]string, len(caps))
	for i, c := range caps {
		parts[i] = "{" + c.String() + "}"
	}
	return strings.Join(parts, ", ")
}

// CapabilityFor is the CSI volume capability of v used with the given
// modes (one of its capabilities): that capability's fs type, else the
// volume's, and the volume's mount flags.
func (v *CSIVolume) CapabilityFor(access AccessMode, attachment AttachmentMode) *csipb.VolumeCapability {
	want := RequestedCapability{AccessMode: access, AttachmentMode: attachment}
	opts := v.MountOptions.Copy()
	if i := slices.IndexFunc(v.Capabilities(), want.same); i >= 0 && v.Capabilities()[i].FSType != "" {
		if opts == nil {
			opts = &MountOptions{}
		}
		opts.FSType = v.Capabilities()[i].FSType
	}
	return VolumeCapability(access, attachment, opts)
}

// CSICapabilities are v's capabilities as CSI's, as
// ValidateVolumeCapabilities takes them.
func (v *CSIVolume) CSICapabilities() []*csipb.VolumeCapability {
	var out []*csipb.VolumeCapability
	for _, c := range v.Capabilities() {
		out = append(out, v.CapabilityFor(c.AccessMode, c.AttachmentMode))
	}
	return out
}

func capabilitiesToProto(caps []RequestedCapability) []*messages.CatalogCapability {
	var out []*messages.CatalogCapability
	for _, c := range caps {
		out = append(out, &messages.CatalogCapability{AccessMode: string(c.AccessMode), AttachmentMode: string(c.AttachmentMode), FsType: c.FSType})
	}
	return out
}

func capabilitiesFromProto(ms []*messages.CatalogCapability) []RequestedCapability {
	var out []RequestedCapability
	for _, m := range ms {
		out = append(out, RequestedCapability{AccessMode: AccessMode(m.GetAccessMode()), AttachmentMode: AttachmentMode(m.GetAttachmentMode()), FSType: m.GetFsType()})
	}
	return out
}
