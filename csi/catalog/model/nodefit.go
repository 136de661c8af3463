package model

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// NodeFit is nil when the node that claims with c can take v, by what its
// plugin said of it in NodeGetInfo (node, nil when the plugin has no
// fingerprint there, and then nothing is known to refuse):
//   - when v can be reached only from some topologies, the node must stand
//     in one of them (all of a topology's segments among the node's), else
//     ErrTopologyMismatch naming both;
//   - when the plugin sets max_volumes_per_node, onNode (the other volumes
//     of v's plugin claimed on that node, as "namespace/id") must leave room
//     for one more, else ErrNodeVolumeLimit naming the limit, the node and
//     the volumes that count.
//
// A node that holds a claim on v already passes: v is there. v is never
// changed.
func (v *CSIVolume) NodeFit(c *Claim, node *NodeInfo, onNode []string) error {
	if node == nil || v.ClaimedOn(c.NodeID) {
		return nil
	}
	if !v.ReachableFrom(node.AccessibleTopology) {
		return errorf(ErrTopologyMismatch,
			"volume %s/%s can be reached only from topology %s; node %s (plugin node ID %s) stands at %s: claim it on a node in one of them",
			v.Namespace, v.ID, topologiesString(v.Topologies), c.NodeID, node.NodeID, node.AccessibleTopology.String())
	}
	self := v.Namespace + "/" + v.ID
	others := slices.DeleteFunc(slices.Clone(onNode), func(s string) bool { return s == self })
	if node.MaxVolumes > 0 && int64(len(others)) >= node.MaxVolumes {
		slices.Sort(others)
		return errorf(ErrNodeVolumeLimit,
			"node %s holds %d volumes of plugin %s (%s), its limit (max_volumes_per_node from NodeGetInfo) is %d: release one of them there, or claim volume %s on another node",
			c.NodeID, len(others), v.PluginID, strings.Join(others, ", "), node.MaxVolumes, self)
	}
	return nil
}

// ClaimedOn reports whether v holds a claim, in any state, on node.
func (v *CSIVolume) ClaimedOn(node string) bool {
	return slices.Contains(v.claimNodes(), node)
}

// NodeOn is the fingerprint of p's node service on node; nil when p is
// nil or has none there.
func (p *CSIPlugin) NodeOn(node string) *NodeInfo {
	if p == nil || p.Nodes[node] == nil {
		return nil
	}
	return p.Nodes[node].NodeInfo
}

// stands reports whether a node at t stands in want: every segment of want
// is one of t's. A node without a topology stands in none.
func (t *Topology) stands(want *Topology) bool {
	if t == nil || want == nil {
		return false
	}
	for k, val := range want.Segments {
		if got, ok := t.Segments[k]; !ok || got != val {
			return false
		}
	}
	return true
}

// ReachableFrom reports whether a node at t can reach v: v names no
// topology, or t stands in one of them.
func (v *CSIVolume) ReachableFrom(t *Topology) bool {
	return len(v.Topologies) == 0 || slices.ContainsFunc(v.Topologies, t.stands)
}

// String is t's segments as "k=v,k=v", keys sorted; "no topology" for none.
func (t *Topology) String() string {
	if t == nil || len(t.Segments) == 0 {
		return "no topology"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(t.Segments)) {
		parts = append(parts, fmt.Sprintf("%s=%s", k, t.Segments[k]))
	}
	return strings.Join(parts, ",")
}

// topologiesString is ts as "k=v,k=v or k=v".
func topologiesString(ts []*Topology) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = t.String()
	}
	return strings.Join(parts, " or ")
}

// HealthOf is the health its plugin p gives v (PluginHealth), but for a
// volume confined to topologies it counts only the healthy nodes that stand
// in one of them: v is schedulable only where it can be reached. A fleet,
// which knows every node, uses it; a node's own catalog knows only itself,
// and refuses a claim there with ErrTopologyMismatch instead.
func HealthOf(v *CSIVolume, p *CSIPlugin) Health {
	h := PluginHealth(p)
	if p == nil || len(v.Topologies) == 0 {
		return h
	}
	h.NodesHealthy = 0
	for _, info := range p.Nodes {
		if info.Healthy && info.NodeInfo != nil && v.ReachableFrom(info.NodeInfo.AccessibleTopology) {
			h.NodesHealthy++
		}
	}
	h.Schedulable = h.NodesHealthy > 0 && (!p.ControllerRequired || p.ControllersHealthy > 0)
	return h
}
