package model

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/plugvisor/plugvisor/names"
)

// DefaultNamespace is the namespace NewCSIVolume gives a volume.
const DefaultNamespace = "default"

// Claim is one alloc's use of a volume.
type Claim struct {
	// AllocID is the alloc that holds the claim; a volume holds at most one
	// claim per alloc.
	AllocID string
	// NodeID is the node the alloc runs on.
	NodeID string
	// Mode says whether the alloc reads or writes the volume.
	Mode ClaimMode
	// State is where the claim stands: taken, or on its way to being freed.
	State ClaimState
	// LastError says why a past claim is stuck in its state; empty for a
	// held claim.
	LastError string
	// AccessMode and AttachmentMode are the volume's capability the claim
	// chose. Empty in a new claim means the only one that fits; empty in a
	// claim written before volumes had several means the volume's own modes.
	AccessMode     AccessMode
	AttachmentMode AttachmentMode
}

// Copy returns a copy of c; nil for nil.
func (c *Claim) Copy() *Claim {
	if c == nil {
		return nil
	}
	out := *c
	return &out
}

// Validate returns nil when every field of c is set to a known value, and an
// error matching ErrInvalidClaim otherwise.
func (c *Claim) Validate() error { return c.check() }

func (c *Claim) check() error {
	switch {
	case c == nil:
		return errorf(ErrInvalidClaim, "claim is nil")
	case c.AllocID == "":
		return errorf(ErrInvalidClaim, "claim on node %q has an empty alloc ID", c.NodeID)
	case c.NodeID == "":
		return errorf(ErrInvalidClaim, "claim by alloc %s has an empty node ID", c.AllocID)
	}
	for _, err := range []error{names.Check("alloc ID", c.AllocID), names.Check("node ID", c.NodeID)} {
		if err != nil {
			return errorf(ErrInvalidClaim, "claim: %v", err)
		}
	}
	if err := c.Mode.check(); err != nil {
		return within(err, ErrInvalidClaim, "claim by alloc %s", c.AllocID)
	}
	if err := c.State.check(); err != nil {
		return within(err, ErrInvalidClaim, "claim by alloc %s", c.AllocID)
	}
	if c.AccessMode != "" {
		if err := c.AccessMode.check(); err != nil {
			return within(err, ErrInvalidClaim, "claim by alloc %s: access_mode", c.AllocID)
		}
	}
	if c.AttachmentMode != "" {
		if err := c.AttachmentMode.check(); err != nil {
			return within(err, ErrInvalidClaim, "claim by alloc %s: attachment_mode", c.AllocID)
		}
	}
	return nil
}

// Health is what a volume knows of its plugin's health. PluginHealth derives
// it; CSIVolume.UpdateHealth copies it into a volume.
type Health struct {
	// Schedulable is true when the plugin can serve new claims: it has a
	// healthy node plugin and, when ControllerRequired, a healthy controller.
	Schedulable bool
	// ControllerRequired is true when the plugin needs a controller to
	// publish volumes.
	ControllerRequired bool
	// ControllersHealthy counts the healthy controller plugins.
	ControllersHealthy int
	// ControllersExpected counts the controller plugins the plugin's jobs ask
	// for.
	ControllersExpected int
	// NodesHealthy counts the healthy node plugins.
	NodesHealthy int
	// NodesExpected counts the node plugins the plugin's jobs ask for.
	NodesExpected int
}

// PluginHealth derives a volume's health from its plugin p: the plugin's
// counts, and schedulable iff p has a healthy node plugin and, when it
// requires a controller, a healthy controller plugin. A nil plugin (one that
// is gone) gives the zero Health: not schedulable.
func PluginHealth(p *CSIPlugin) Health {
	if p == nil {
		return Health{}
	}
	return Health{
		Schedulable:         p.NodesHealthy > 0 && (!p.ControllerRequired || p.ControllersHealthy > 0),
		ControllerRequired:  p.ControllerRequired,
		ControllersHealthy:  p.ControllersHealthy,
		ControllersExpected: p.ControllersExpected,
		NodesHealthy:        p.NodesHealthy,
		NodesExpected:       p.NodesExpected,
	}
}

// CSIVolume is a CSI volume known to the catalog: what it is (ID, plugin,
// modes, topologies), who uses it (claims), and whether new claims can be
// granted (health, resource exhaustion).
type CSIVolume struct {
	// ID identifies the volume within its namespace.
	ID string
	// Namespace scopes the volume's ID.
	Namespace string
	// PluginID is the CSI plugin that serves the volume.
	PluginID string
	// AccessMode fixes how many nodes may use the volume and how many
	// writers it may have. It is set at registration; claims never change it.
	AccessMode AccessMode
	// AttachmentMode fixes how the volume is handed to allocs.
	AttachmentMode AttachmentMode
	// RequestedCapabilities are the ways the volume can be used, each
	// claim choosing one; the first is AccessMode and AttachmentMode. Nil
	// means the one capability of those modes (see Capabilities).
	RequestedCapabilities []RequestedCapability
	// Topologies are where the volume can be reached; their order carries no
	// meaning.
	Topologies []*Topology

	// ExternalID is the plugin's ID of the volume, the one every CSI RPC
	// carries (PluginVolumeID); empty means the same as ID. One plugin
	// volume lives in one catalog volume only.
	ExternalID string
	// CapacityBytes is the size the plugin last reported; 0 means unknown.
	CapacityBytes int64
	// Parameters are the plugin's opaque creation parameters.
	Parameters map[string]string
	// MutableParameters are the parameters ControllerModifyVolume set, key
	// by key as the modifies that succeeded left them (RecordModifyOn). A
	// registration keeps them: they are state, not description (Equal
	// leaves them out). The CSI spec's mutable_parameters; Nomad 1.11's
	// CSIVolume has no such field.
	MutableParameters map[string]string
	// Secrets go to the plugin with the RPCs that take them; they never
	// show when printed or encoded (see Secrets).
	Secrets Secrets
	// Context is the volume_context the plugin returned at creation.
	Context map[string]string
	// MountOptions say how a file-system volume is mounted; nil for none.
	MountOptions *MountOptions
	// RequestedTopologies are the accessibility requirements the volume was
	// created with; Topologies are where the plugin put it.
	RequestedTopologies []*Topology
	// Created says the volume was created through the plugin's controller,
	// so that deleting it destroys it on the plugin.
	Created bool
	// Deleting marks a delete under way: no new claim is granted.
	Deleting bool

	// ReadClaims maps an alloc ID to its read claim.
	ReadClaims map[string]*Claim
	// WriteClaims maps an alloc ID to its write claim.
	WriteClaims map[string]*Claim
	// PastClaims maps an alloc ID to its claim while it is being released.
	// The alloc keeps its read or write claim (and so its writer slot and its
	// node) until the release reaches ClaimStateReadyToFree.
	PastClaims map[string]*Claim
	// Attachments maps a node ID to the volume's attachment to it, as a
	// fleet records them (see Attachment); nil on a single node, whose
	// volume manager keeps its own.
	Attachments map[string]*Attachment

	// Health is the plugin's health as last copied by UpdateHealth.
	Health
	// ResourceExhausted, when not zero, is when the volume's storage was
	// found exhausted; no new claim is granted until it is cleared.
	ResourceExhausted time.Time

	// CreateIndex is the catalog index at which the volume was registered.
	CreateIndex uint64
	// ModifyIndex is the catalog index at which the volume last changed.
	ModifyIndex uint64
}

// NewCSIVolume returns a volume with the given ID and index, in the default
// namespace, with empty claim maps. The caller sets the plugin and modes.
func NewCSIVolume(id string, index uint64) *CSIVolume {
	v := &CSIVolume{ID: id, Namespace: DefaultNamespace, CreateIndex: index, ModifyIndex: index}
	v.ensureMaps()
	return v
}

// ensureMaps makes the claim maps before a write to them.
func (v *CSIVolume) ensureMaps() {
	for _, m := range []*map[string]*Claim{&v.ReadClaims, &v.WriteClaims, &v.PastClaims} {
		if *m == nil {
			*m = map[string]*Claim{}
		}
	}
}

// Copy returns a deep copy of v that shares no map, slice or pointer with it
// (a nil map or slice stays nil); nil for nil.
func (v *CSIVolume) Copy() *CSIVolume {
	if v == nil {
		return nil
	}
	out := *v
	out.Topologies = copyTopologies(v.Topologies)
	out.RequestedCapabilities = slices.Clone(v.RequestedCapabilities)
	out.ReadClaims = copyMap(v.ReadClaims, (*Claim).Copy)
	out.WriteClaims = copyMap(v.WriteClaims, (*Claim).Copy)
	out.PastClaims = copyMap(v.PastClaims, (*Claim).Copy)
	out.Attachments = copyMap(v.Attachments, (*Attachment).Copy)
	copyPluginSide(&out, v)
	return &out
}

// Equal reports whether v and o describe the same volume: the same ID,
// namespace, plugin, modes, and the same topologies as sets (in any order,
// repeats counted once). Claims, health and indexes are state rather than
// description and are not compared. Two nil volumes are equal.
func (v *CSIVolume) Equal(o *CSIVolume) bool {
	if v == nil || o == nil {
		return v == o
	}
	return v.ID == o.ID &&
		v.Namespace == o.Namespace &&
		v.PluginID == o.PluginID &&
		v.AccessMode == o.AccessMode &&
		v.AttachmentMode == o.AttachmentMode &&
		slices.Equal(v.Capabilities(), o.Capabilities()) &&
		topologySetsEqual(v.Topologies, o.Topologies) &&
		v.equalPluginSide(o)
}

// InUse reports whether any alloc holds a claim on v.
func (v *CSIVolume) InUse() bool {
	return len(v.ReadClaims) > 0 || len(v.WriteClaims) > 0
}

// CanReadOnly reports whether a new read claim could be granted: the volume
// is schedulable and its resources are not exhausted. (A single-node volume
// also needs the claim to come from the node it is claimed on.)
func (v *CSIVolume) CanReadOnly() bool { return v.readRefusal() == nil }

// CanWrite reports whether a new write claim could be granted: the volume
// can be read, its access mode allows writers, and it has fewer writers than
// the mode allows. (A single-node volume also needs the claim to come from
// the node it is claimed on.)
func (v *CSIVolume) CanWrite() bool {
	for _, c := range v.Capabilities() {
		if v.writeRefusal(c.AccessMode) == nil {
			return true
		}
	}
	return false
}

// readRefusal says why no new read claim can be granted, or nil.
func (v *CSIVolume) readRefusal() error {
	if !v.Schedulable {
		reach := ""
		if len(v.Topologies) > 0 {
			reach = " that stand in its topology " + topologiesString(v.Topologies)
		}
		return v.errorf(ErrVolumeUnschedulable,
			"is not schedulable: plugin %q has %d healthy node plugins%s and %d healthy controllers (controller required: %t)",
			v.PluginID, v.NodesHealthy, reach, v.ControllersHealthy, v.ControllerRequired)
	}
	if !v.ResourceExhausted.IsZero() {
		return v.errorf(ErrVolumeUnschedulable, "is not schedulable: its resources are exhausted since %s",
			v.ResourceExhausted.Format(time.RFC3339))
	}
	return nil
}

// writeRefusal says why no new write claim with access mode access can be
// granted, or nil: the writers' limit is the fewest that any writer's
// capability allows, the new one's included.
func (v *CSIVolume) writeRefusal(access AccessMode) error {
	if err := v.readRefusal(); err != nil {
		return err
	}
	if access.ReadOnly() {
		if len(v.RequestedCapabilities) > 1 {
			return v.errorf(ErrWriteClaimRefused, "is read-only as %s: claim it with a writer capability", access)
		}
		return v.errorf(ErrWriteClaimRefused, "is read-only")
	}
	if max, _ := v.writerLimit(&access); len(v.WriteClaims) >= max {
		return v.errorf(ErrVolumeMaxClaims, "already has a writer (alloc %s)", joinKeys(v.WriteClaims))
	}
	return nil
}

// UpdateHealth copies the health of p, the volume's plugin, into v (see
// PluginHealth); a nil p means the plugin is gone and makes v unschedulable.
// A plugin with another ID is refused with ErrPluginMismatch and changes
// nothing.
func (v *CSIVolume) UpdateHealth(p *CSIPlugin) error {
	if p != nil && p.ID != v.PluginID {
		return v.errorf(ErrPluginMismatch, "is served by plugin %q, not %q", v.PluginID, p.ID)
	}
	v.Health = PluginHealth(p)
	return nil
}

// errorf returns an error about v matching kind: "volume "ID"
// (access mode) " followed by the formatted detail.
func (v *CSIVolume) errorf(kind error, format string, args ...any) error {
	return errorf(kind, "volume %q (%s) "+format, append([]any{v.ID, v.AccessMode}, args...)...)
}

// CSIVolumeStub is the summary of a volume shown in lists. Its fields are
// the volume's fields of the same names (Topologies a copy of them), and the
// numbers of read and write claims.
type CSIVolumeStub struct {
	ID, Namespace, PluginID        string
	AccessMode                     AccessMode
	AttachmentMode                 AttachmentMode
	Topologies                     []*Topology
	CurrentReaders, CurrentWriters int
	Health
	ResourceExhausted        time.Time
	CreateIndex, ModifyIndex uint64
}

// Stub returns the list summary of v; it shares nothing with v.
func (v *CSIVolume) Stub() *CSIVolumeStub {
	return &CSIVolumeStub{
		ID:                v.ID,
		Namespace:         v.Namespace,
		PluginID:          v.PluginID,
		AccessMode:        v.AccessMode,
		AttachmentMode:    v.AttachmentMode,
		Topologies:        copyTopologies(v.Topologies),
		CurrentReaders:    len(v.ReadClaims),
		CurrentWriters:    len(v.WriteClaims),
		Health:            v.Health,
		ResourceExhausted: v.ResourceExhausted,
		CreateIndex:       v.CreateIndex,
		ModifyIndex:       v.ModifyIndex,
	}
}

// Validate checks every field of v and the consistency of its claims, and
// reports every problem at once (errors.Join); each matches ErrInvalidVolume.
// The claim checks are the invariants the claim operations keep: claims filed
// under their own alloc, read and write claims in state taken, no alloc in
// both, past claims only for held claims, no more writers than the access
// mode allows, and one node at most for a single-node mode.
func (v *CSIVolume) Validate() error {
	if v == nil {
		return errorf(ErrInvalidVolume, "volume is nil")
	}
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, errorf(ErrInvalidVolume, "volume %q: "+format, append([]any{v.ID}, args...)...))
	}
	add := func(err error) {
		if err != nil {
			errs = append(errs, within(err, ErrInvalidVolume, "volume %q", v.ID))
		}
	}
	for _, f := range []struct{ field, value string }{{"ID", v.ID}, {"namespace", v.Namespace}, {"plugin ID", v.PluginID}} {
		if f.value == "" {
			bad("%s must not be empty", f.field)
		} else if err := names.Check(f.field, f.value); err != nil {
			bad("%v", err)
		}
	}
	add(v.AccessMode.check())
	add(v.AttachmentMode.check())
	v.checkCapabilities(bad)
	for i, t := range v.Topologies {
		if t == nil {
			bad("topology %d is nil", i)
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(t.Segments)) {
			if err := names.CheckKey(fmt.Sprintf("topologies[%d] segment", i), k); err != nil {
				bad("%v", err)
			}
		}
	}
	v.checkPluginSide(bad)
	v.checkClaimMaps(bad, add)
	v.checkAttachments(bad, add)
	return errors.Join(errs...)
}

// checkClaimMaps reports, through bad and add, what is wrong with v's
// claim maps.
func (v *CSIVolume) checkClaimMaps(bad func(string, ...any), add func(error)) {
	claimSets := []struct {
		name   string
		claims map[string]*Claim
	}{{"read", v.ReadClaims}, {"write", v.WriteClaims}, {"past", v.PastClaims}}
	for _, m := range claimSets {
		for _, id := range slices.Sorted(maps.Keys(m.claims)) {
			c := m.claims[id]
			if err := c.check(); err != nil {
				add(within(err, ErrInvalidVolume, "%s claim filed under alloc %s", m.name, id))
				continue
			}
			if c.AllocID != id {
				bad("%s claim filed under alloc %s belongs to alloc %s", m.name, id, c.AllocID)
			}
			v.checkClaimPlace(m.name, c, bad)
		}
	}
	if max, by := v.writerLimit(nil); len(v.WriteClaims) > max {
		n := len(v.WriteClaims)
		bad("has %d write claim(s) (allocs %s); %s allows %d", n, joinKeys(v.WriteClaims), by, max)
	}
	if nodes, h := v.claimNodes(), v.singleNodeHeld(); h != nil && len(nodes) > 1 {
		bad("is claimed on nodes %v; %s allows one node", nodes, v.capabilityOf(h).AccessMode)
	}
	caps := v.Capabilities()
	for _, h := range v.heldClaims() {
		if c := v.capabilityOf(h); !slices.ContainsFunc(caps, c.same) {
			bad("claim of alloc %s uses %s %s, not a capability of the volume", h.AllocID, c.AccessMode, c.AttachmentMode)
		}
	}
}

// checkClaimPlace reports through bad whether claim c, valid in itself, is
// in the right state for the map named name and agrees with v's other maps.
func (v *CSIVolume) checkClaimPlace(name string, c *Claim, bad func(string, ...any)) {
	held := v.heldClaim(c.AllocID)
	switch name {
	case "past":
		switch {
		case c.State == ClaimStateTaken || c.State == ClaimStateReadyToFree:
			bad("past claim of alloc %s is in state %s", c.AllocID, c.State)
		case held == nil:
			bad("past claim of alloc %s has no read or write claim", c.AllocID)
		case held.Mode != c.Mode || held.NodeID != c.NodeID:
			bad("past claim of alloc %s (%s on %s) differs from its held claim (%s on %s)",
				c.AllocID, c.Mode, c.NodeID, held.Mode, held.NodeID)
		}
	default:
		if string(c.Mode) != name || c.State != ClaimStateTaken {
			bad("%s claim of alloc %s is a %s claim in state %s", name, c.AllocID, c.Mode, c.State)
		}
		if name == "read" && v.WriteClaims[c.AllocID] != nil {
			bad("alloc %s holds both a read and a write claim", c.AllocID)
		}
	}
}

// heldClaim returns the read or write claim of allocID, or nil.
func (v *CSIVolume) heldClaim(allocID string) *Claim {
	if c, ok := v.WriteClaims[allocID]; ok {
		return c
	}
	return v.ReadClaims[allocID]
}

// claimNodes returns, sorted, the nodes on which v has read or write claims.
func (v *CSIVolume) claimNodes() []string {
	set := map[string]bool{}
	for _, m := range []map[string]*Claim{v.ReadClaims, v.WriteClaims} {
		for _, c := range m {
			if c != nil {
				set[c.NodeID] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(set))
}
