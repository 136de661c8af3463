package api_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/messages"
)

// TestTheFleetRoutesAnswerAsDescribed drives the fleet's node routes
// against an agent in cluster mode, beside a second node that holds a
// claim: each request and answer, successes and refusals, is what
// openapi.yaml says.
func TestTheFleetRoutesAnswerAsDescribed(t *testing.T) {
	doc := loadSpec(t)
	srv := etcdtest.StartProcess(t) // the agent's cluster member starts a protoactor remote
	a, err := agent.Start(agent.Config{DataDir: t.TempDir(), Logger: probe.Logger(t), NodeID: "n1",
		Cluster: &agent.ClusterConfig{Etcd: srv.Endpoints(), Address: "127.0.0.1:0", LeaseTTL: fleet.MinLeaseTTL}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Shutdown(context.Background())) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n2, err := fleet.Open(ctx, fleet.Config{Endpoints: srv.Endpoints(), NodeID: "n2", LeaseTTL: fleet.MinLeaseTTL})
	require.NoError(t, err)
	defer func() { require.NoError(t, n2.Close()) }()
	require.NoError(t, n2.PutFingerprints(ctx, []*messages.CSIFingerprint{
		{Type: csi.TypeNode, Name: "hp", AllocId: "hp-n2", Healthy: true, NodeInfo: &messages.CSINodeInfo{NodeId: "csi-n2"}}}))
	v := model.NewCSIVolume("db", 0)
	v.PluginID, v.AccessMode, v.AttachmentMode = "hp", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem
	_, err = n2.RegisterVolume(ctx, v)
	require.NoError(t, err)
	_, err = n2.Claim(ctx, "", "db", &model.Claim{AllocID: "web-1", NodeID: "n2", Mode: model.ClaimModeWrite, State: model.ClaimStateTaken})
	require.NoError(t, err)
	c := newSpecClient(t, doc, a.SocketPath())

	require.Contains(t, string(c.do("GET", "/v1/fleet/nodes", "", 200)), `"alloc_id": "web-1"`)
	c.do("POST", "/v1/fleet/nodes/nope/drain", "", 404)
	c.refuse("POST", "/v1/fleet/nodes/n2/drain", `{"force":true}`)
	c.do("POST", "/v1/fleet/nodes/n2/drain", "", 200)
	c.do("POST", "/v1/fleet/nodes/n2/drain", "{}", 409)
	c.do("POST", "/v1/fleet/nodes/n1/free-claims", "", 409)
	require.Contains(t, string(c.do("POST", "/v1/fleet/nodes/n2/free-claims", "", 200)), `"alloc_id": "web-1"`)
	c.do("POST", "/v1/fleet/nodes/n2/eligible", "", 200)

	// The plugin view: n2's instance of hp counts, as seen from n1.
	view := string(c.do("GET", "/v1/csi/plugins/hp", "", 200))
	require.Contains(t, view, `"scope": "fleet"`)
	require.Contains(t, view, `"nodes_healthy": 1`)
	c.do("GET", "/v1/csi/plugins/nope", "", 404)
	c.do("PUT", "/v1/csi/plugins/hp/expect", `{"nodes":2,"controllers":-1}`, 400)
	require.Contains(t, string(c.do("GET", "/v1/csi/plugins/hp", "", 200)), `"nodes_expected": 0`, "a refusal changes nothing")
	require.Contains(t, string(c.do("PUT", "/v1/csi/plugins/hp/expect", `{"nodes":2,"controllers":1}`, 200)), `"nodes_expected": 2`)
	require.Contains(t, string(c.do("GET", "/v1/csi/plugins/hp", "", 200)), `"controllers_expected": 1`)
	require.Contains(t, string(c.do("PUT", "/v1/csi/plugins/gone/expect", `{}`, 200)), `"plugin": null`)

	// The list: hp as the fleet counts it, a node plugin (n2's only), with
	// its volume and its expectation.
	var list struct {
		Plugins []api.PluginViewJSON `json:"plugins"`
	}
	require.NoError(t, json.Unmarshal(c.do("GET", "/v1/csi/plugins", "", 200), &list))
	require.Len(t, list.Plugins, 1)
	p := list.Plugins[0]
	require.Equal(t, []any{"hp", "fleet", "node", 1, 1, 2, 1}, []any{p.ID, p.Scope, p.Type, p.Volumes, p.NodesHealthy, p.NodesExpected, p.ControllersExpected})
	for op := range operations(doc) {
		require.True(t, c.covered[op] || !isFleetOp(op), "%s was driven to a success", op)
	}
}
