package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/messages"
)

// step is one request of a scenario and what must come back: the status,
// and a piece of the body (of the error, for an error).
type step struct {
	name               string
	method, path, body string
	status             int
	want               string
	before             func(*backend) // runs before the request, e.g. to fail the store
	header             map[string]string
}

// run sends each step in order to the server's unix-socket handler: the
// steps share the backend's state.
func run(t *testing.T, b *backend, steps []step) {
	t.Helper()
	h := b.server.HandlerFor(unixListener)
	for _, s := range steps {
		if s.before != nil {
			s.before(b)
		}
		got := serve(t, h, request{method: s.method, path: s.path, body: s.body, header: s.header})
		require.Equal(t, s.status, got.status, "%s: %s", s.name, got.body)
		if got.status < 300 {
			require.Contains(t, got.body, s.want, s.name)
			continue
		}
		require.Equal(t, "application/json", got.header.Get("Content-Type"), s.name)
		require.Contains(t, got.error(t), s.want, s.name)
	}
}

// fakeCSI is a CSI manager's list of fingerprints.
type fakeCSI []*messages.CSIFingerprint

func (f fakeCSI) Plugins() []*messages.CSIFingerprint { return f }

func TestThePluginRoutesAnswerEveryStatusWithAClearBody(t *testing.T) {
	b := newBackend(t)
	b.server.Metrics = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metric 1\n")) })
	b.server.Health = func() api.Health {
		return api.Health{Plugins: 2, Reasons: []string{"store: the latest durable write failed"}}
	}
	run(t, b, []step{
		{name: "health reports degraded with its reasons", method: "GET", path: "/v1/health", status: 200,
			want: `"status": "degraded"`},
		{name: "an empty listing", method: "GET", path: "/v1/plugins", status: 200, want: `"plugins": []`},
		{name: "a registration", method: "POST", path: "/v1/plugins", body: registerBody("p", "a1"), status: 200, want: `"alloc_id": "a1"`},
		{name: "a listing by type", method: "GET", path: "/v1/plugins?type=csi-node", status: 200, want: `"name": "p"`},
		{name: "a listing of another type", method: "GET", path: "/v1/plugins?type=csi-controller", status: 200, want: `"plugins": []`},
		{name: "a bad type filter", method: "GET", path: "/v1/plugins?type=../x", status: 400, want: "path separator"},
		{name: "a plugin", method: "GET", path: "/v1/plugins/csi-node/p", status: 200, want: `"allocations"`},
		{name: "a missing plugin", method: "GET", path: "/v1/plugins/csi-node/q", status: 404,
			want: `not found: plugin "q" of type "csi-node" is not registered`},
		{name: "a bad name in the path", method: "GET", path: "/v1/plugins/csi-node/a..b", status: 400, want: "must not contain"},
		{name: "bad JSON", method: "POST", path: "/v1/plugins", body: `{"type":`, status: 400, want: "bad request body"},
		{name: "an empty body", method: "POST", path: "/v1/plugins", body: " ", status: 400, want: "empty; send a JSON object"},
		{name: "an unknown field", method: "POST", path: "/v1/plugins", body: `{"colour":"red"}`, status: 400, want: "colour"},
		{name: "an invalid plugin", method: "POST", path: "/v1/plugins", body: `{"type":"csi-node","alloc_id":"a"}`, status: 400,
			want: "plugin name must not be empty"},
		{name: "a body over the limit", method: "POST", path: "/v1/plugins", body: `{"name":"` + strings.Repeat("x", api.MaxBodyBytes) + `"}`,
			status: 413, want: "request body is over a limit: it may hold 1048576 bytes"},
		{name: "a registration while the store fails", method: "POST", path: "/v1/plugins", body: registerBody("q", "a1"),
			before: func(b *backend) { b.bucket.Failing.Store(true) }, status: 500, want: "durable store failed"},
		{name: "a deregistration of an unknown alloc", method: "DELETE", path: "/v1/plugins/csi-node/p/nope",
			before: func(b *backend) { b.bucket.Failing.Store(false) }, status: 404, want: "has no allocation"},
		{name: "a deregistration with a bad alloc", method: "DELETE", path: "/v1/plugins/csi-node/p/..%2f..", status: 400, want: "path separator"},
		{name: "a deregistration", method: "DELETE", path: "/v1/plugins/csi-node/p/a1", status: 200, want: `"deregistered": "a1"`},
		{name: "a bad replay flag", method: "GET", path: "/v1/events?replay=maybe", status: 400,
			want: `bad query parameter: replay is "maybe"; want true or false`},
		{name: "CSI instances without a CSI manager", method: "GET", path: "/v1/csi/instances", status: 404, want: "this agent runs no CSI manager"},
		{name: "CSI plugins without a CSI catalog", method: "GET", path: "/v1/csi/plugins", status: 404, want: "this agent runs no CSI catalog"},
		{name: "metrics", method: "GET", path: "/metrics", status: 200, want: "metric 1"},
		{name: "the wrong method on a known path", method: "PUT", path: "/v1/plugins", body: "{}", status: 405, want: "method not allowed"},
		{name: "the wrong method on health", method: "POST", path: "/v1/health", body: "{}", status: 405, want: "method not allowed"},
		{name: "the wrong method on metrics", method: "POST", path: "/metrics", body: "{}", status: 405, want: "method not allowed"},
		{name: "an unknown endpoint", method: "GET", path: "/v1/nothing", status: 404, want: "no such endpoint /v1/nothing"},
		{name: "a registration after the registry shut down", method: "POST", path: "/v1/plugins", body: registerBody("p", "a2"),
			before: func(b *backend) { require.NoError(t, b.registry.Shutdown()) }, status: 503, want: "registry shut down"},
	})
}

func TestAnAgentWithoutCSIPartsSaysSoOnEachRoute(t *testing.T) {
	b := newBackend(t)
	none := "this agent runs no CSI catalog and volume manager"
	run(t, b, []step{
		{name: "health with nothing to report", method: "GET", path: "/v1/health", status: 200, want: `"reasons": []`},
		{name: "no metrics handler", method: "GET", path: "/metrics", status: 404, want: "no such endpoint /metrics"},
		{name: "volume registration", method: "POST", path: "/v1/volumes", body: "{}", status: 404, want: none},
		{name: "volume listing", method: "GET", path: "/v1/volumes", status: 404, want: none},
		{name: "a volume", method: "GET", path: "/v1/volumes/default/v", status: 404, want: none},
		{name: "volume deregistration", method: "DELETE", path: "/v1/volumes/default/v", status: 404, want: none},
		{name: "a claim", method: "POST", path: "/v1/volumes/default/v/claim", body: "{}", status: 404, want: none},
		{name: "a mount", method: "POST", path: "/v1/volumes/default/v/mount", body: "{}", status: 404, want: none},
		{name: "an unmount", method: "POST", path: "/v1/volumes/default/v/unmount", body: "{}", status: 404, want: none},
		{name: "the wrong method on volumes", method: "PUT", path: "/v1/volumes", body: "{}", status: 405, want: "method not allowed"},
		{name: "the wrong method on a claim", method: "GET", path: "/v1/volumes/default/v/claim", status: 405, want: "method not allowed"},
		{name: "the fleet's nodes", method: "GET", path: "/v1/fleet/nodes", status: 404, want: "this agent is not in a fleet"},
		{name: "a drain", method: "POST", path: "/v1/fleet/nodes/n1/drain", body: "{}", status: 404, want: "this agent is not in a fleet"},
	})
	b.server.CSI = fakeCSI{{Type: "csi-node", Name: "hp", AllocId: "a1", Healthy: true}}
	run(t, b, []step{{name: "CSI instances", method: "GET", path: "/v1/csi/instances", status: 200, want: `"healthy": true`}})
}

func TestTheEventStreamReplaysThenFollows(t *testing.T) {
	b := newBackend(t)
	require.NoError(t, b.registry.RegisterPlugin(&messages.PluginInfo{Type: "csi-node", Name: "old", AllocId: "a1",
		Connection: &messages.ConnectionInfo{SocketPath: "/run/old.sock"}}))
	follow := followEvents(t, b, "?type=csi-node&replay=true")
	next := func() api.Event {
		var ev api.Event
		require.NoError(t, json.Unmarshal(follow(t), &ev))
		return ev
	}
	replayed := next()
	require.Equal(t, "registered", replayed.Kind)
	require.True(t, replayed.Replayed)
	require.Contains(t, string(replayed.Event), `"old"`)

	require.NoError(t, b.registry.RegisterPlugin(&messages.PluginInfo{Type: "csi-node", Name: "new", AllocId: "a1",
		Connection: &messages.ConnectionInfo{SocketPath: "/run/new.sock"}}))
	live := next()
	require.Equal(t, "registered", live.Kind)
	require.False(t, live.Replayed)
	require.Contains(t, string(live.Event), `"new"`)
}
