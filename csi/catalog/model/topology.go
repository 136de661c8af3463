package model

import (
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
