package fleet_test

import (
	"testing"

	"github.com/stretchr/testify/require"

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
