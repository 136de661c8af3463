package model

import (
	"maps"
	"slices"
	"strings"
)

// copyMap returns a copy of m whose values are copied with cp; nil for nil.
func copyMap[V any](m map[string]*V, cp func(*V) *V) map[string]*V {
	if m == nil {
		return nil
	}
	out := make(map[string]*V, len(m))
	for k, v := range m {
		out[k] = cp(v)
	}
	return out
}

// joinKeys returns the keys of m, sorted and joined by ", ".
func joinKeys[V any](m map[string]V) string {
	return strings.Join(slices.Sorted(maps.Keys(m)), ", ")
}
