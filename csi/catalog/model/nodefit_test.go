package model

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNodeFitRefusesANodeOutOfTopologyOrAtItsVolumeLimit(t *testing.T) {
	zoneA := &Topology{Segments: map[string]string{"zone": "a"}}
	atZoneA := &NodeInfo{NodeID: "p1", AccessibleTopology: &Topology{Segments: map[string]string{"zone": "a", "rack": "r1"}}}
	atZoneB := &NodeInfo{NodeID: "p1", AccessibleTopology: &Topology{Segments: map[string]string{"zone": "b"}}}
	limit2 := &NodeInfo{NodeID: "p1", MaxVolumes: 2}
	tests := []struct {
		name       string
		topologies []*Topology
		held       *Claim // a claim v holds already, if any
		node       *NodeInfo
		onNode     []string
		want       error
		says       string
	}{
		{name: "a node the plugin has not fingerprinted", topologies: []*Topology{zoneA}},
		{name: "a node in the volume's topology", topologies: []*Topology{zoneA}, node: atZoneA},
		{name: "a volume with no topology", node: atZoneB},
		{name: "a node in another zone", topologies: []*Topology{zoneA}, node: atZoneB, want: ErrTopologyMismatch,
			says: "volume default/db can be reached only from topology zone=a; node n1 (plugin node ID p1) stands at zone=b: claim it on a node in one of them"},
		{name: "a node without a topology", topologies: []*Topology{zoneA}, node: &NodeInfo{NodeID: "p1"}, want: ErrTopologyMismatch,
			says: "stands at no topology"},
		{name: "a node under its limit", node: limit2, onNode: []string{"default/a"}},
		{name: "a node at its limit", node: limit2, onNode: []string{"default/b", "default/a"}, want: ErrNodeVolumeLimit,
			says: "node n1 holds 2 volumes of plugin ebs (default/a, default/b), its limit (max_volumes_per_node from NodeGetInfo) is 2: release one of them there, or claim volume default/db on another node"},
		{name: "the volume itself does not count", node: limit2, onNode: []string{"default/db", "default/a"}},
		{name: "a node without a limit", node: &NodeInfo{NodeID: "p1"}, onNode: []string{"default/a", "default/b", "default/c"}},
		{name: "a node that holds the volume already", node: limit2, onNode: []string{"default/a", "default/b"},
			held: readClaim("other", "n1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := healthyVolume(AccessModeMultiNodeMultiWriter)
			v.Topologies = tt.topologies
			if tt.held != nil {
				require.NoError(t, v.Claim(tt.held))
			}
			before := v.Copy()
			err := v.NodeFit(readClaim("web", "n1"), tt.node, tt.onNode)
			require.Equal(t, before, v, "NodeFit changes nothing")
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tt.want)
			require.Contains(t, err.Error(), tt.says)
		})
	}
}
