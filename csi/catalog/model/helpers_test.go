package model

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"

	"github.com/stretchr/testify/require"
)

// healthyVolume returns volume "db" of plugin "ebs" with the given access
// mode, schedulable and unclaimed.
func healthyVolume(mode AccessMode) *CSIVolume {
	v := NewCSIVolume("db", 1)
	v.PluginID = "ebs"
	v.AccessMode = mode
	v.AttachmentMode = AttachmentModeFileSystem
	v.Health = Health{Schedulable: true, NodesHealthy: 1}
	return v
}

func readClaim(alloc, node string) *Claim {
	return &Claim{AllocID: alloc, NodeID: node, Mode: ClaimModeRead, State: ClaimStateTaken}
}

func writeClaim(alloc, node string) *Claim {
	return &Claim{AllocID: alloc, NodeID: node, Mode: ClaimModeWrite, State: ClaimStateTaken}
}

// moved returns a copy of c in state s.
func moved(c *Claim, s ClaimState) *Claim {
	out := c.Copy()
	out.State = s
	return out
}

// fingerprint returns a fingerprint of plugin "ebs" by alloc, with a
// controller part, a node part or both.
func fingerprint(alloc string, healthy, controller, node bool) *CSIInfo {
	info := &CSIInfo{PluginID: "ebs", AllocID: alloc, Healthy: healthy, Provider: "aws", ProviderVersion: "1.2.3"}
	if controller {
		info.ControllerInfo = &ControllerInfo{SupportsAttachDetach: true, UnknownCapabilities: []int32{4}}
	}
	if node {
		info.NodeInfo = &NodeInfo{
			NodeID:              "i-" + alloc,
			MaxVolumes:          16,
			AccessibleTopology:  &Topology{Segments: map[string]string{"zone": "a"}},
			UnknownCapabilities: []int32{11},
		}
	}
	return info
}

// snapshot renders v deeply (JSON follows pointers, maps and slices), so that
// it can be compared after the copies of v have been mutated.
func snapshot(t require.TestingT, v any) string {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// requireDeepCopy fails unless cp equals original and shares no memory with
// it, and scribbling over cp leaves original as it was.
func requireDeepCopy[T any](t require.TestingT, original, cp *T, scribble func(*T)) {
	require.Equal(t, original, cp)
	requireNoSharing(t, original, cp)
	before := snapshot(t, original)
	scribble(cp)
	require.Equal(t, before, snapshot(t, original), "mutating the copy changed the original")
}

// requireNoSharing fails unless a and b, of the same type, share no pointer,
// map or slice reachable through exported fields. time.Time is a value and
// is not walked.
func requireNoSharing(t require.TestingT, a, b any) {
	var problems []string
	walkShared(reflect.ValueOf(a), reflect.ValueOf(b), "", &problems)
	require.Empty(t, problems, "the copy shares memory with its original")
}

var timeType = reflect.TypeFor[time.Time]()

func walkShared(a, b reflect.Value, path string, problems *[]string) {
	shared := func(what string) { *problems = append(*problems, fmt.Sprintf("%s %s", what, path)) }
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return
		}
		if a.Kind() == reflect.Pointer && a.Pointer() == b.Pointer() {
			shared("pointer")
			return
		}
		walkShared(a.Elem(), b.Elem(), path, problems)
	case reflect.Map:
		if a.IsNil() || b.IsNil() {
			return
		}
		if a.Pointer() == b.Pointer() {
			shared("map")
			return
		}
		iter := a.MapRange()
		for iter.Next() {
			if bv := b.MapIndex(iter.Key()); bv.IsValid() {
				walkShared(iter.Value(), bv, fmt.Sprintf("%s[%v]", path, iter.Key()), problems)
			}
		}
	case reflect.Slice:
		if a.Cap() > 0 && b.Cap() > 0 && a.Pointer() == b.Pointer() {
			shared("slice")
			return
		}
		for i := range min(a.Len(), b.Len()) {
			walkShared(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i), problems)
		}
	case reflect.Struct:
		if a.Type() == timeType {
			return
		}
		for i := range a.NumField() {
			if a.Type().Field(i).IsExported() {
				walkShared(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name, problems)
			}
		}
	}
}

// scribbleVolume changes everything a deep copy of a volume owns: each claim,
// each topology and its segments, and the maps and slices themselves.
func scribbleVolume(v *CSIVolume) {
	for _, m := range []map[string]*Claim{v.ReadClaims, v.WriteClaims, v.PastClaims} {
		for _, id := range slices.Collect(maps.Keys(m)) {
			c := m[id]
			c.NodeID += "-scribbled"
			c.State = "scribbled"
			m[id+"-scribbled"] = c
		}
	}
	for i, t := range v.Topologies {
		if t != nil && t.Segments != nil {
			t.Segments["scribbled"] = "yes"
		}
		v.Topologies[i] = nil
	}
	v.Topologies = append(v.Topologies, &Topology{})
}

// scribblePlugin changes everything a deep copy of a plugin owns.
func scribblePlugin(p *CSIPlugin) {
	for id, j := range p.Jobs {
		j.Expected++
		p.Jobs[id] = j
	}
	p.Jobs["scribbled"] = PluginJob{ID: "scribbled"}
	for _, m := range []map[string]*CSIInfo{p.Controllers, p.Nodes} {
		for _, node := range slices.Collect(maps.Keys(m)) {
			info := m[node]
			info.Healthy = !info.Healthy
			if ci := info.ControllerInfo; ci != nil {
				ci.SupportsClone = !ci.SupportsClone
				if len(ci.UnknownCapabilities) > 0 {
					ci.UnknownCapabilities[0] = -1
				}
			}
			if ni := info.NodeInfo; ni != nil {
				ni.MaxVolumes = -1
				if ni.AccessibleTopology != nil && ni.AccessibleTopology.Segments != nil {
					ni.AccessibleTopology.Segments["scribbled"] = "yes"
				}
				if len(ni.UnknownCapabilities) > 0 {
					ni.UnknownCapabilities[0] = -1
				}
			}
			m[node+"-scribbled"] = info
		}
	}
}
