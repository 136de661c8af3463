package agent_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

// startClusterAgent starts an agent of node n1 in cluster mode on srv,
// with a short lease; it stops with the test. Its cluster member may stop
// before its own etcd client is back from the outage (gRPC's reconnect
// backoff): then it cannot revoke its member lease, says so, and the key
// expires by itself; nothing else may fail.
func startClusterAgent(t *testing.T, srv *etcdtest.Server) *agent.Agent {
	t.Helper()
	a, err := agent.Start(agent.Config{DataDir: dataDir(t), Logger: probe.Logger(t), NodeID: "n1",
		Cluster: &agent.ClusterConfig{Etcd: srv.Endpoints(), Address: "127.0.0.1:0", LeaseTTL: fleet.MinLeaseTTL,
			RequestTimeout: time.Second}})
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := a.Shutdown(context.Background()); err != nil {
			require.ErrorContains(t, err, "revoke the lease of")
		}
	})
	return a
}

// TestAnEtcdOutageDegradesHealthAnswers503AndRecoversWithoutARestart
// stops etcd under a cluster agent: its health turns degraded, naming
// etcd and the lost lease, claims and mounts answer 503 with the fleet's
// message, and the metrics show the lease lost; once etcd is back, health
// is ok again with nothing restarted.
func TestAnEtcdOutageDegradesHealthAnswers503AndRecoversWithoutARestart(t *testing.T) {
	srv := etcdtest.StartProcess(t) // the agent's cluster member starts a protoactor remote
	a := startClusterAgent(t, srv)
	c := unixClient(t, a)
	// Held: renewed within 1.5 s of a 2 s lease, which a loaded machine's
	// late renewal can miss for a moment (the fleet is then degraded,
	// rightly): the test waits for it, before and after the outage.
	waitHeld(t, a, c)
	status, body, err := call(c, "POST", "http://plugvisor/v1/volumes", "", `{"id":"db","plugin_id":"hp","access_mode":"single-node-writer","attachment_mode":"file-system"}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, body)
	series := scrape(t, a)
	require.Equal(t, "1", series["plugvisor_fleet_grain_activations_total"], "the registration ran in the volume's grain")
	require.Equal(t, "0", series[`plugvisor_fleet_claims_total{outcome="ok"}`])

	srv.Stop()
	for _, op := range []string{"claim", "mount"} {
		status, body, err := call(c, "POST", "http://plugvisor/v1/volumes/default/db/"+op, "", `{"alloc_id":"web-1"}`)
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, status, "%s: %s", op, body)
		// Within half the lease's TTL the fleet's own refusal; past it, the
		// volume manager's fence refuses first.
		require.Regexp(t, `claims are refused until etcd answers|lease in the fleet is not held|fenced until`, body, op)
	}
	var reasons string
	require.Eventually(t, func() bool {
		h := healthOf(t, c)
		reasons = strings.Join(toStrings(h["reasons"]), "\n")
		return h["status"] == "degraded" && strings.Contains(reasons, "lease is lost") &&
			strings.Contains(reasons, "etcd at "+srv.Endpoints()[0]+" did not answer")
	}, time.Minute, 50*time.Millisecond, "health turns degraded, naming the lease and etcd: %s", reasons)
	series = scrape(t, a)
	require.Equal(t, "2", series["plugvisor_fleet_lease_standing"], "lost")
	require.Equal(t, "0", series["plugvisor_fleet_etcd_reachable"])
	unanswered := 0
	for name, value := range series {
		if strings.HasPrefix(name, "plugvisor_fleet_etcd_requests_total{") && strings.Contains(name, `result="unavailable"`) && value != "0" {
			unanswered++
		}
	}
	require.Positive(t, unanswered, "the etcd calls that went unanswered are counted")

	srv.Restart()
	waitHeld(t, a, c)
}

// waitHeld waits until a's health is ok and its lease held (metric 0).
func waitHeld(t *testing.T, a *agent.Agent, c *http.Client) {
	t.Helper()
	var reasons string
	require.Eventually(t, func() bool {
		h := healthOf(t, c)
		reasons = strings.Join(toStrings(h["reasons"]), "\n")
		return h["status"] == "ok" && scrape(t, a)["plugvisor_fleet_lease_standing"] == "0"
	}, time.Minute, 50*time.Millisecond, "health is ok and the lease held, by itself: %s", reasons)
}

func toStrings(v any) []string {
	var out []string
	for _, s := range v.([]any) {
		out = append(out, s.(string))
	}
	return out
}

// TestAnAgentWhoseEtcdIsGoneStopsCleanly kills the fleet's etcd, then
// stops a cluster agent: its leases cannot be revoked, which it says at
// WARN (they expire by themselves), and it stops without an error and
// without an ERROR line; each call it makes while stopping waits at most
// a second (fleet.Store.Hurry). Before, it took 25–50 s and exited
// non-zero with an ERROR.
func TestAnAgentWhoseEtcdIsGoneStopsCleanly(t *testing.T) {
	srv := etcdtest.StartProcess(t)
	logs := &probe.LogBuffer{}
	a, err := agent.Start(agent.Config{DataDir: dataDir(t), Logger: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info}), NodeID: "n1",
		Cluster: &agent.ClusterConfig{Etcd: srv.Endpoints(), Address: "127.0.0.1:0", LeaseTTL: fleet.MinLeaseTTL, GCInterval: time.Second, GCGrace: 10 * time.Second}})
	require.NoError(t, err)
	waitHeld(t, a, unixClient(t, a))
	srv.Stop()
	require.NoError(t, a.Shutdown(context.Background()))
	require.NotContains(t, logs.String(), "[ERROR]")
	require.Contains(t, logs.String(), "could not revoke the node's lease")
	// Without member TLS, the start warned naming the port the member
	// bound, not the 0 it was asked for.
	require.Regexp(t, `INSECURE: -cluster-insecure: .* reach this member at 127\.0\.0\.1:[1-9][0-9]*`, logs.String())
	require.NotContains(t, logs.String(), "at 127.0.0.1:0")
}
