package model

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
)

// Topology is a CSI topology: the segments (for example zone or rack labels)
// that say where a volume can be reached or where a node stands.
type Topology struct {
	// Segments maps a topology key to its value.
	Segments map[string]string
}

// Copy returns a copy of t that shares nothing with it; nil for nil.
func (t *Topology) Copy() *Topology {
	if t == nil {
		return nil
	}
	return &Topology{Segments: maps.Clone(t.Segments)}
}

// Equal reports whether t and o have the same segments. A nil topology equals
// only nil; a nil and an empty Segments map are equal.
func (t *Topology) Equal(o *Topology) bool {
	if t == nil || o == nil {
		return t == o
	}
	return maps.Equal(t.Segments, o.Segments)
}

// copyTopologies returns a deep copy of ts, nil for nil.
func copyTopologies(ts []*Topology) []*Topology {
	if ts == nil {
		return nil
	}
	out := make([]*Topology, len(ts))
	for i, t := range ts {
		out[i] = t.Copy()
	}
	return out
}

// topologySetsEqual reports whether a and b hold the same topologies, in any
// order and counting repeats once.
func topologySetsEqual(a, b []*Topology) bool {
	return topologySubset(a, b) && topologySubset(b, a)
}

// topologySubset reports whether every topology of a is also in b.
func topologySubset(a, b []*Topology) bool {
	for _, t := range a {
		if !slices.ContainsFunc(b, t.Equal) {
			return false
		}
	}
	return true
}

// TopologyRequiredOf refuses v, a volume to register or create, when it
// names no topology (Topologies, or a create's requirements, as
// withRequirements says) and its plugin p, as the caller knows it (a
// node's catalog: its own fingerprints; a fleet: every node's),
// advertises VOLUME_ACCESSIBILITY_CONSTRAINTS: ErrTopologyRequired and
// ErrInvalid, naming the field and the remedy. Nil for a nil plugin.
func TopologyRequiredOf(v *CSIVolume, p *CSIPlugin, withRequirements bool) error {
	if !p.TopologyRequired() || len(v.Topologies) > 0 || withRequirements {
		return nil
	}
	return Refusal(ErrInvalid, fmt.Errorf("%w: volume %s/%s: topologies: plugin %q advertises VOLUME_ACCESSIBILITY_CONSTRAINTS, so each of its volumes needs a topology: "+
		"give one (volume register -topology KEY=VALUE, the API's topologies; volume create -requisite or -preferred)",
		ErrTopologyRequired, cmp.Or(v.Namespace, DefaultNamespace), v.ID, v.PluginID))
}

// TopologyRefusal is the refusal of the first volume of vs that names no
// topology while its plugin, as plugins has it, requires one
// (TopologyRequiredOf; a volume its plugin created has the topology the
// plugin gave it, Created): named as a batch's item (BatchItemError) when
// batch; nil when every volume may be registered. plugins is what the
// caller knows: a node's catalog its own fingerprints, a fleet every live
// node's.
func TopologyRefusal(vs []*CSIVolume, plugins map[string]*CSIPlugin, batch bool) error {
	for i, v := range vs {
		err := TopologyRequiredOf(v, plugins[v.PluginID], v.Created)
		if err != nil && batch {
			return BatchItemError(i, v.ID, err)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
