package fleet_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/messages"
)

// TestListPluginsGivesEveryPluginWithItsCountsAndExpectations: the list
// holds every plugin a live node fingerprints and every one an
// expectation alone names, sorted, with the same counts Plugin gives.
func TestListPluginsGivesEveryPluginWithItsCountsAndExpectations(t *testing.T) {
	srv := etcdtest.Start(t)
	a, b := open(t, srv, "n1"), open(t, srv, "n2")
	ctx := testCtx(t)
	require.NoError(t, a.PutFingerprints(ctx, []*messages.CSIFingerprint{
		nodePlugin("ebs", "a1", true), controllerPlugin("ebs", "a1", true), nodePlugin("nfs", "a3", true)}))
	require.NoError(t, b.PutFingerprints(ctx, []*messages.CSIFingerprint{nodePlugin("ebs", "b1", false)}))
	_, err := a.ExpectPlugin(ctx, "ebs", 3, 1)
	require.NoError(t, err)
	_, err = a.ExpectPlugin(ctx, "gone", 2, 0)
	require.NoError(t, err)

	list, err := b.ListPlugins(ctx)
	require.NoError(t, err)
	var ids []string
	for _, p := range list {
		ids = append(ids, p.ID)
		one, err := b.Plugin(ctx, p.ID)
		require.NoError(t, err)
		require.Equal(t, []int{one.NodesHealthy, one.NodesExpected, one.ControllersHealthy, one.ControllersExpected, len(one.Nodes), len(one.Controllers)},
			[]int{p.NodesHealthy, p.NodesExpected, p.ControllersHealthy, p.ControllersExpected, len(p.Nodes), len(p.Controllers)}, p.ID)
	}
	require.Equal(t, []string{"ebs", "gone", "nfs"}, ids)
	require.Equal(t, []int{1, 3, 1, 1}, []int{list[0].NodesHealthy, list[0].NodesExpected, list[0].ControllersHealthy, list[0].ControllersExpected})
}

// TestControllerNodesAreTheLiveNodesWithAHealthyControllerAndTheirAddresses:
// a controller operation of a plugin can run on the nodes whose
// controller instance is healthy; the list names each with the address its
// member listens on, and leaves out an unhealthy controller and a node
// instance.
func TestControllerNodesAreTheLiveNodesWithAHealthyControllerAndTheirAddresses(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := testCtx(t)
	stores := map[string]*fleet.Store{}
	for _, n := range []string{"n1", "n2", "n3"} {
		s, err := fleet.Open(ctx, fleet.Config{Endpoints: srv.Endpoints(), NodeID: n, LeaseTTL: fleet.MinLeaseTTL, Address: "127.0.0.1:70" + n[1:]})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		stores[n] = s
	}
	require.NoError(t, stores["n1"].PutFingerprints(ctx, []*messages.CSIFingerprint{nodePlugin("ebs", "a1", true)}))
	require.NoError(t, stores["n2"].PutFingerprints(ctx, []*messages.CSIFingerprint{controllerPlugin("ebs", "b1", true)}))
	require.NoError(t, stores["n3"].PutFingerprints(ctx, []*messages.CSIFingerprint{controllerPlugin("ebs", "c1", false)}))

	got, err := stores["n1"].ControllerNodes(ctx, "ebs")
	require.NoError(t, err)
	require.Equal(t, []fleet.ControllerNode{{Node: "n2", Address: "127.0.0.1:702"}}, got)
	got, err = stores["n1"].ControllerNodes(ctx, "nfs")
	require.NoError(t, err)
	require.Empty(t, got)
	_, err = stores["n1"].ControllerNodes(ctx, "a/b")
	require.ErrorIs(t, err, model.ErrInvalid)
}
