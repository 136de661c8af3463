package model

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// pluginOp is one change to a plugin and the healthy counts after it.
type pluginOp struct {
	do                 func(p *CSIPlugin)
	controllers, nodes int
}

func add(node string, info *CSIInfo) func(p *CSIPlugin) {
	return func(p *CSIPlugin) {
		if err := p.AddPlugin(node, info); err != nil {
			panic(err)
		}
	}
}

func deleteNode(node string) func(p *CSIPlugin) {
	return func(p *CSIPlugin) { p.DeleteNode(node) }
}

func TestPluginHealthyCountsStayExact(t *testing.T) {
	cases := []struct {
		name string
		ops  []pluginOp
	}{
		{"a node plugin going healthy, unhealthy, then deleted is counted out once", []pluginOp{
			{add("n1", fingerprint("a1", true, false, true)), 0, 1},
			{add("n1", fingerprint("a1", false, false, true)), 0, 0},
			{deleteNode("n1"), 0, 0},
		}},
		{"a controller going healthy, unhealthy, then deleted is counted out once", []pluginOp{
			{add("n1", fingerprint("a1", true, true, false)), 1, 0},
			{add("n1", fingerprint("a1", false, true, false)), 0, 0},
			{deleteNode("n1"), 0, 0},
		}},
		{"a healthy fingerprint sent twice counts once", []pluginOp{
			{add("n1", fingerprint("a1", true, false, true)), 0, 1},
			{add("n1", fingerprint("a1", true, false, true)), 0, 1},
		}},
		{"an unhealthy first fingerprint is kept and counts nothing", []pluginOp{
			{add("n1", fingerprint("a1", false, false, true)), 0, 0},
			{add("n1", fingerprint("a1", true, false, true)), 0, 1},
		}},
		{"a monolith counts as a controller and a node plugin", []pluginOp{
			{add("n1", fingerprint("a1", true, true, true)), 1, 1},
			{add("n2", fingerprint("a2", true, true, true)), 2, 2},
			{deleteNode("n1"), 1, 1},
		}},
		{"a node fingerprint on a monolith's node leaves its controller alone", []pluginOp{
			{add("n1", fingerprint("a1", true, true, true)), 1, 1},
			{add("n1", fingerprint("a1", false, false, true)), 1, 0},
		}},
		{"a newer alloc replacing an older one on a node adjusts by the difference", []pluginOp{
			{add("n1", fingerprint("a1", true, false, true)), 0, 1},
			{add("n1", fingerprint("a2", false, false, true)), 0, 0},
			{add("n1", fingerprint("a3", true, false, true)), 0, 1},
		}},
		{"deleting the older alloc leaves the newer alloc's fingerprint", []pluginOp{
			{add("n1", fingerprint("a1", true, true, true)), 1, 1},
			{add("n1", fingerprint("a2", true, false, true)), 1, 1},
			{func(p *CSIPlugin) { p.DeleteAlloc("n1", "a1") }, 0, 1},
			{func(p *CSIPlugin) { p.DeleteAlloc("n1", "a1") }, 0, 1},
			{func(p *CSIPlugin) { p.DeleteAlloc("n1", "a2") }, 0, 0},
		}},
		{"deleting an unknown node changes nothing", []pluginOp{
			{add("n1", fingerprint("a1", true, true, true)), 1, 1},
			{deleteNode("n9"), 1, 1},
			{deleteNode(""), 1, 1},
		}},
		{"deleting a node twice counts out once", []pluginOp{
			{add("n1", fingerprint("a1", true, true, true)), 1, 1},
			{add("n2", fingerprint("a2", true, true, true)), 2, 2},
			{deleteNode("n1"), 1, 1},
			{deleteNode("n1"), 1, 1},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := NewCSIPlugin("ebs", 1)
			for i, op := range tc.ops {
				op.do(p)
				require.Equal(t, op.controllers, p.ControllersHealthy, "controllers after op %d", i+1)
				require.Equal(t, op.nodes, p.NodesHealthy, "nodes after op %d", i+1)
				requireCountsMatchMaps(t, p)
			}
		})
	}
}

// requireCountsMatchMaps fails unless p's healthy counts equal a recount of
// its maps.
func requireCountsMatchMaps(t require.TestingT, p *CSIPlugin) {
	recount := func(m map[string]*CSIInfo) (n int) {
		for _, info := range m {
			n += healthy(info)
		}
		return n
	}
	require.Equal(t, recount(p.Controllers), p.ControllersHealthy, "controllers healthy")
	require.Equal(t, recount(p.Nodes), p.NodesHealthy, "nodes healthy")
}

func TestDeleteNodeAndDeleteAllocReportWhatTheyRemoved(t *testing.T) {
	p := NewCSIPlugin("ebs", 1)
	require.NoError(t, p.AddPlugin("n1", fingerprint("a1", true, true, true)))
	require.False(t, p.DeleteAlloc("n1", "a9"))
	require.False(t, p.DeleteNode("n9"))
	require.True(t, p.DeleteNode("n1"))
	require.False(t, p.DeleteNode("n1"))
	require.True(t, p.IsEmpty())

	var bare CSIPlugin
	require.False(t, bare.DeleteNode("n1"), "a plugin without maps has nothing to delete")
}

func TestAddPluginKeepsItsOwnCopyAndFollowsTheFingerprint(t *testing.T) {
	p := &CSIPlugin{ID: "ebs"}
	info := requireController(fingerprint("a1", true, true, true))
	require.NoError(t, p.AddPlugin("n1", info))
	require.Equal(t, info, p.Controllers["n1"])
	require.Equal(t, info, p.Nodes["n1"])
	require.True(t, p.ControllerRequired)
	require.Equal(t, "aws", p.Provider)
	require.Equal(t, "1.2.3", p.Version)

	info.Healthy = false
	info.NodeInfo.UnknownCapabilities[0] = 99
	require.True(t, p.Nodes["n1"].Healthy, "the plugin must keep its own copy of a fingerprint")
	require.Equal(t, []int32{11}, p.Nodes["n1"].NodeInfo.UnknownCapabilities)
	require.NotSame(t, p.Controllers["n1"], p.Nodes["n1"])

	later := fingerprint("a2", true, false, true)
	later.Provider = ""
	require.NoError(t, p.AddPlugin("n2", later))
	require.False(t, p.ControllerRequired, "ControllerRequired follows the latest fingerprint")
	require.Equal(t, "aws", p.Provider, "a fingerprint without a provider keeps the known one")
}

func TestPluginJobsSetTheExpectedCounts(t *testing.T) {
	p := NewCSIPlugin("ebs", 1)
	require.True(t, p.IsEmpty())
	require.NoError(t, p.SetJob(PluginJob{ID: "ctl", Type: PluginTypeController, Expected: 2}))
	require.NoError(t, p.SetJob(PluginJob{ID: "nodes", Type: PluginTypeNode, Expected: 5}))
	require.NoError(t, p.SetJob(PluginJob{ID: "mono", Type: PluginTypeMonolith, Expected: 1}))
	require.Equal(t, 3, p.ControllersExpected)
	require.Equal(t, 6, p.NodesExpected)
	require.False(t, p.IsEmpty(), "a plugin with jobs is not empty")

	require.NoError(t, p.SetJob(PluginJob{ID: "nodes", Type: PluginTypeNode, Expected: 3}))
	require.Equal(t, 4, p.NodesExpected, "setting a job again replaces it")

	require.True(t, p.DeleteJob("mono"))
	require.False(t, p.DeleteJob("mono"))
	require.Equal(t, 2, p.ControllersExpected)
	require.Equal(t, 3, p.NodesExpected)
	require.True(t, p.DeleteJob("ctl"))
	require.True(t, p.DeleteJob("nodes"))
	require.Zero(t, p.ControllersExpected)
	require.Zero(t, p.NodesExpected)
	require.True(t, p.IsEmpty())
	require.True(t, (*CSIPlugin)(nil).IsEmpty())
}

func TestPluginCopySharesNothing(t *testing.T) {
	p := NewCSIPlugin("ebs", 3)
	require.NoError(t, p.AddPlugin("n1", fingerprint("a1", true, true, true)))
	require.NoError(t, p.AddPlugin("n2", fingerprint("a2", false, false, true)))
	require.NoError(t, p.SetJob(PluginJob{ID: "j", Type: PluginTypeMonolith, Expected: 2}))

	requireDeepCopy(t, p, p.Copy(), scribblePlugin)
	require.Nil(t, (*CSIPlugin)(nil).Copy())
}

func TestPluginStub(t *testing.T) {
	p := NewCSIPlugin("ebs", 3)
	p.ModifyIndex = 4
	require.NoError(t, p.AddPlugin("n1", requireController(fingerprint("a1", true, true, true))))
	require.NoError(t, p.SetJob(PluginJob{ID: "j", Type: PluginTypeMonolith, Expected: 2}))
	require.Equal(t, &CSIPluginStub{
		ID: "ebs", Provider: "aws", Version: "1.2.3", ControllerRequired: true,
		ControllersHealthy: 1, ControllersExpected: 2, NodesHealthy: 1, NodesExpected: 2,
		CreateIndex: 3, ModifyIndex: 4,
	}, p.Stub())
}

func TestOnlyAnUnhealthyFingerprintWithTheStoppedDescriptionSaysItsInstanceStopped(t *testing.T) {
	for _, tt := range []struct {
		name        string
		healthy     bool
		description string
		want        bool
	}{
		{"a final fingerprint", false, StoppedDescription, true},
		{"an unhealthy live instance", false, "Probe: plugin is not ready", false},
		{"a healthy instance, whatever it says", true, StoppedDescription, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			info := fingerprint("a1", tt.healthy, false, true)
			info.HealthDescription = tt.description
			require.Equal(t, tt.want, info.Stopped())
		})
	}
	require.False(t, (*CSIInfo)(nil).Stopped(), "no fingerprint is no stopped instance")
}
