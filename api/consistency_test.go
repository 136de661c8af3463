package api_test

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/messages"
)

// TestEveryEndpointRefusesBadRequestsTheSameWay sends each kind of bad
// request to endpoints of every family: each is refused with 400, an error
// that says what is wrong and names the field or parameter, and changes
// nothing.
func TestEveryEndpointRefusesBadRequestsTheSameWay(t *testing.T) {
	b := newBackend(t)
	run(t, b, []step{
		{name: "trailing data after a registration", method: "POST", path: "/v1/plugins",
			body: registerBody("p", "a1") + ` {"x":1}`, status: 400, want: "bad request body: data after the JSON object"},
		{name: "trailing data after a volume registration", method: "POST", path: "/v1/volumes",
			body: `{"id":"v"} x`, status: 404, want: "this agent runs no CSI catalog"},
		{name: "a registration that is JSON null", method: "POST", path: "/v1/plugins", body: `null`, status: 400,
			want: "bad request body: send a JSON object"},
		{name: "a registration that is a list", method: "POST", path: "/v1/plugins", body: `[]`, status: 400,
			want: "bad request body: send a JSON object"},
		{name: "a field under another spelling", method: "POST", path: "/v1/plugins",
			body: `{"type":"csi-node","name":"p","allocId":"a1","connection":{"socket_path":"/run/a.sock"}}`, status: 400,
			want: `unknown field "allocId"`},
		{name: "a field of the wrong type", method: "POST", path: "/v1/plugins", body: `{"type":7}`, status: 400,
			want: `field "type" must be string`},
		{name: "an unknown field inside the connection", method: "POST", path: "/v1/plugins",
			body: `{"type":"csi-node","name":"p","alloc_id":"a1","connection":{"socket":"/run/a.sock"}}`, status: 400,
			want: `unknown field "connection.socket"`},
		{name: "a bad replay flag is a bad query, not a bad body", method: "GET", path: "/v1/events?replay=maybe", status: 400,
			want: `bad query parameter: replay is "maybe"; want true or false`},
		{name: "an unknown query parameter", method: "GET", path: "/v1/plugins?tpye=csi-node", status: 400,
			want: `bad query parameter: unknown parameter "tpye" (GET /v1/plugins takes: type)`},
		{name: "a query parameter on an endpoint that takes none", method: "GET", path: "/v1/health?verbose=1", status: 400,
			want: `unknown parameter "verbose" (GET /v1/health takes none)`},
		{name: "a malformed query", method: "GET", path: "/v1/plugins?type=%zz", status: 400,
			want: `bad query parameter: invalid URL escape "%zz"`},
		{name: "a repeated query parameter", method: "GET", path: "/v1/plugins?type=a&type=b", status: 400,
			want: `bad query parameter: "type" is given 2 times; give it once`},
		{name: "nothing was registered", method: "GET", path: "/v1/plugins", status: 200, want: `"plugins": []`},
		{name: "a field given twice", method: "POST", path: "/v1/plugins",
			body: `{"type":"csi-node","name":"p","alloc_id":"a1","alloc_id":"a2","connection":{"socket_path":"/run/a.sock"}}`, status: 400,
			want: `bad request body: field "alloc_id" appears twice; send each field once`},
		{name: "a field given twice inside the connection", method: "POST", path: "/v1/plugins",
			body: `{"type":"csi-node","name":"p","alloc_id":"a1","connection":{"socket_path":"/run/a.sock","socket_path":"/run/b.sock"}}`, status: 400,
			want: `field "connection.socket_path" appears twice`},
		{name: "the same name in two objects is no repeat", method: "POST", path: "/v1/plugins",
			body: `{"type":"csi-node","name":"p","alloc_id":"a1","connection":{"socket_path":"/run/a.sock"},"options":{"name":"x"}}`, status: 200,
			want: `"registered"`},
	})
}

// TestTheJSONIsOneShapeEverywhere checks the rules every response follows:
// snake_case names, booleans always present, numbers as numbers, lists as
// [] and never null, times absent when unset.
func TestTheJSONIsOneShapeEverywhere(t *testing.T) {
	b := newBackend(t)
	require.NoError(t, b.registry.RegisterPlugin(&messages.PluginInfo{Type: "csi-node", Name: "p", AllocId: "a1",
		Connection: &messages.ConnectionInfo{SocketPath: "/run/a1.sock"}}))
	b.server.CSI = fakeCSI{{Type: "csi-node", Name: "p", AllocId: "a1", Healthy: false, HealthDescription: "probe failed"}}
	h := b.server.HandlerFor(unixListener)

	var csiPlugins struct {
		Plugins []map[string]any `json:"plugins"`
	}
	got := serve(t, h, request{method: "GET", path: "/v1/csi/instances"})
	require.Equal(t, 200, got.status, got.body)
	require.NoError(t, json.Unmarshal([]byte(got.body), &csiPlugins))
	require.Len(t, csiPlugins.Plugins, 1)
	fp := csiPlugins.Plugins[0]
	require.Equal(t, false, fp["healthy"], "an unhealthy plugin says healthy: false")
	require.NotContains(t, fp, "update_time", "an unset time is absent")

	var plugin struct {
		Current     map[string]any   `json:"current"`
		Allocations []map[string]any `json:"allocations"`
	}
	got = serve(t, h, request{method: "GET", path: "/v1/plugins/csi-node/p"})
	require.Equal(t, 200, got.status, got.body)
	require.NoError(t, json.Unmarshal([]byte(got.body), &plugin))
	require.Equal(t, map[string]any{}, plugin.Current["options"], "an empty map is {}")
	allocations := got.body[strings.Index(got.body, `"allocations"`):strings.Index(got.body, `"current"`)]
	require.Regexp(t, `(?s)"type".*"name".*"version".*"connection".*"alloc_id".*"options"`, allocations,
		"a message's fields come in the proto's order")

	got = serve(t, h, request{method: "DELETE", path: "/v1/plugins/csi-node/p/a1"})
	require.Equal(t, 200, got.status, got.body)
	require.JSONEq(t, `{"deregistered":"a1","current":null}`, got.body, "a plugin that is gone has no current allocation")
}

// TestReplayedEventsCarryTheirSequenceAsANumber reads a replayed event
// and a live one: both carry the registry's sequence as a JSON number,
// inside the event as on the line, and say whether they were replayed.
func TestReplayedEventsCarryTheirSequenceAsANumber(t *testing.T) {
	b := newBackend(t)
	require.NoError(t, b.registry.RegisterPlugin(&messages.PluginInfo{Type: "csi-node", Name: "old", AllocId: "a1",
		Connection: &messages.ConnectionInfo{SocketPath: "/run/old.sock"}}))
	follow := followEvents(t, b, "?replay=true")
	next := func() map[string]any {
		var m map[string]any
		require.NoError(t, json.Unmarshal(follow(t), &m))
		return m
	}
	replayed := next()
	require.NoError(t, b.registry.RegisterPlugin(&messages.PluginInfo{Type: "csi-node", Name: "new", AllocId: "a1",
		Connection: &messages.ConnectionInfo{SocketPath: "/run/new.sock"}}))
	live := next()

	require.Equal(t, true, replayed["replayed"])
	require.Equal(t, false, live["replayed"], "a live event says replayed: false")
	for _, l := range []map[string]any{replayed, live} {
		inner := l["event"].(map[string]any)
		require.IsType(t, float64(0), inner["sequence"], "the inner sequence is a number: %v", inner)
		require.Equal(t, l["sequence"], inner["sequence"])
	}
}

// TestHealthNamesTheBuild checks /v1/health carries the build and its
// counts as numbers, whatever the agent reports.
func TestHealthNamesTheBuild(t *testing.T) {
	b := newBackend(t)
	got := serve(t, b.server.HandlerFor(unixListener), request{method: "GET", path: "/v1/health"})
	require.Equal(t, 200, got.status, got.body)
	var h map[string]any
	require.NoError(t, json.Unmarshal([]byte(got.body), &h))
	build := h["build"].(map[string]any)
	require.Equal(t, runtime.Version(), build["go_version"])
	require.NotEmpty(t, build["version"])
	require.NotEmpty(t, build["commit"])
	require.Equal(t, float64(0), h["plugins"])
	require.Equal(t, map[string]any{}, h["discovered_states"], "no states is {}, not null")
	var typed api.Health
	require.NoError(t, json.Unmarshal([]byte(got.body), &typed))
	require.Equal(t, runtime.Version(), typed.Build.GoVersion)
}
