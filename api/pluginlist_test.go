package api_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
)

// TestThePluginListGivesEveryPluginWithItsTypeCountsAndVolumes: GET
// /v1/csi/plugins lists, on one agent, every CSI plugin as GET
// /v1/csi/plugins/{name} gives it: the hostpath plugin serving both
// services in one allocation (monolith) with its volume, a plugin known by
// a volume alone, and one by its expectation alone; the instances'
// fingerprints are GET /v1/csi/instances.
func TestThePluginListGivesEveryPluginWithItsTypeCountsAndVolumes(t *testing.T) {
	dir := hostpathtest.TempDir(t)
	b, a := newCSIBackend(t, dir)
	serveHostpath(t, b, a, dir)
	run(t, b, []step{
		{name: "a volume of hp", method: "POST", path: "/v1/volumes", status: 200, want: `"create_index"`,
			body: `{"id":"db","plugin_id":"hp","access_mode":"single-node-writer","attachment_mode":"file-system"}`},
		{name: "a volume of a plugin nothing runs", method: "POST", path: "/v1/volumes", status: 200, want: `"create_index"`,
			body: `{"id":"old","plugin_id":"gone","access_mode":"single-node-writer","attachment_mode":"file-system"}`},
		{name: "an expectation alone", method: "PUT", path: "/v1/csi/plugins/planned/expect", body: `{"nodes":3,"controllers":1}`, status: 200, want: `"nodes_expected": 3`},
		{name: "the instances", method: "GET", path: "/v1/csi/instances", status: 200, want: `"alloc_id": "a1"`},
	})

	var list struct {
		Plugins []api.PluginViewJSON `json:"plugins"`
	}
	require.Eventually(t, func() bool {
		got := serve(t, b.server.HandlerFor(unixListener), request{method: "GET", path: "/v1/csi/plugins"})
		require.Equal(t, 200, got.status, got.body)
		require.NoError(t, json.Unmarshal([]byte(got.body), &list))
		return len(list.Plugins) == 3 && list.Plugins[1].NodesHealthy == 1
	}, 20*time.Second, 20*time.Millisecond, "the catalog hears of the fingerprints after the manager")
	type row struct {
		ID, Scope, Type                    string
		Volumes, Nodes, Controllers        int
		NodesExpected, ControllersExpected int
	}
	var got []row
	for _, p := range list.Plugins {
		got = append(got, row{p.ID, p.Scope, p.Type, p.Volumes, p.NodesHealthy, p.ControllersHealthy, p.NodesExpected, p.ControllersExpected})
	}
	require.Equal(t, []row{
		{"gone", "node", "", 1, 0, 0, 0, 0},
		{"hp", "node", "monolith", 1, 1, 1, 0, 0},
		{"planned", "node", "", 0, 0, 0, 3, 1},
	}, got)
	one := serve(t, b.server.HandlerFor(unixListener), request{method: "GET", path: "/v1/csi/plugins/hp"})
	require.Contains(t, one.body, `"type": "monolith"`)
	require.Contains(t, one.body, `"volumes": 1`)
}
