package model

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/messages"
)

func TestAFingerprintThatLearnedNothingCarriesTheCapabilitiesOfTheRecordItReplaces(t *testing.T) {
	learned := &messages.CSIFingerprint{
		Type: TypeNode, Name: "zoned", AllocId: "a1", Healthy: true, HealthDescription: "healthy", SocketPath: "/run/a1.sock",
		Capabilities: &messages.CSICapabilities{Plugin: []string{"VOLUME_ACCESSIBILITY_CONSTRAINTS", "CONTROLLER_SERVICE"},
			Node: []string{"STAGE_UNSTAGE_VOLUME", "GET_VOLUME_STATS"}, Unknown: []int32{99}},
		NodeInfo: &messages.CSINodeInfo{NodeId: "csi-n1", MaxVolumes: 4, AccessibleTopology: map[string]string{"zone": "a"}},
	}
	nothing := &messages.CSIFingerprint{Type: TypeNode, Name: "zoned", AllocId: "a2", HealthDescription: "connect: connection refused"}
	p := NewCSIPlugin("zoned", 1)
	for _, fp := range []*messages.CSIFingerprint{learned, nothing} {
		info, err := InstanceFromFingerprint(fp)
		require.NoError(t, err)
		require.NoError(t, p.AddPlugin("n1", info))
	}

	rec := p.Nodes["n1"]
	require.True(t, p.TopologyRequired())
	require.True(t, p.ControllerRequired)
	require.Equal(t, "a1", rec.CapabilitiesFrom)
	require.True(t, rec.CapabilitiesUnknown)
	require.Equal(t, &NodeInfo{RequiresNodeStageVolume: true, SupportsStats: true, UnknownCapabilities: []int32{99}}, rec.NodeInfo,
		"the node's facts are not carried")
	require.Equal(t, rec, InstanceFromProto(throughTheWire(t, rec.Proto())), "the mark is kept on disk")

	forwarded := FingerprintCarrying(nothing, rec)
	require.Nil(t, nothing.GetCapabilities(), "the fingerprint given is not changed")
	again, err := InstanceFromFingerprint(forwarded)
	require.NoError(t, err)
	again.UpdateTime = rec.UpdateTime
	require.Equal(t, rec, again, "the fingerprint a node hands the fleet says what its record says")
	require.Same(t, learned, FingerprintCarrying(learned, rec), "a fingerprint with capabilities is its own word")

	other := &messages.CSIFingerprint{Type: TypeNode, Name: "zoned", AllocId: "a3"}
	require.Same(t, other, FingerprintCarrying(other, rec), "a record of another allocation carries nothing for it")
}

func TestAMonolithThatLearnedNothingCarriesFromOneRecordIntoBothItsEntries(t *testing.T) {
	controller := fingerprint("c1", true, true, false)
	node := fingerprint("n1", true, false, true)
	node.RequiresTopologies, node.NodeInfo.RequiresNodeStageVolume = true, true
	monolith := fingerprint("m1", false, true, true)
	monolith.CapabilitiesUnknown, monolith.ControllerInfo.SupportsAttachDetach = true, false
	p := NewCSIPlugin("ebs", 1)
	for _, info := range []*CSIInfo{controller, node, monolith} {
		require.NoError(t, p.AddPlugin("n1", info))
	}

	rec := p.Nodes["n1"]
	require.Equal(t, rec, p.Controllers["n1"], "one fingerprint, one record in both entries")
	require.Equal(t, "n1", rec.CapabilitiesFrom, "carried from the node's entry")
	require.True(t, rec.RequiresTopologies)
	require.True(t, rec.NodeInfo.RequiresNodeStageVolume)
	require.False(t, rec.ControllerInfo.SupportsAttachDetach, "the node's entry had no controller part to carry")
	require.True(t, p.TopologyRequired())

	again := fingerprint("m2", false, true, true)
	again.CapabilitiesUnknown = true
	require.NoError(t, p.AddPlugin("n1", again))
	require.Equal(t, p.Nodes["n1"], p.Controllers["n1"])
	require.Equal(t, "n1", p.Nodes["n1"].CapabilitiesFrom, "a monolith replacing a monolith carries what it carried")
}
