package agent_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/kubeletreg"
)

// scrape returns the agent's metrics, read through its API socket, as
// series ({name}{labels}, labels sorted by name) to value.
func scrape(t *testing.T, a *agent.Agent) map[string]string {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", a.SocketPath())
	}}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("http://plugvisor/metrics")
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	require.NoError(t, err)
	series := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if i := strings.LastIndexByte(line, ' '); i > 0 && !strings.HasPrefix(line, "#") {
			series[line[:i]] = line[i+1:]
		}
	}
	return series
}

// requireZero checks that every series exists, at zero.
func requireZero(t *testing.T, series map[string]string, want []string) {
	t.Helper()
	for _, s := range want {
		v, ok := series[s]
		require.True(t, ok, "missing %s", s)
		require.Equal(t, "0", v, "%s", s)
	}
}

// product returns format filled with each combination of values, in
// order: the first list varies slowest.
func product(format string, lists ...[]string) []string {
	out := []string{format}
	for _, list := range lists {
		var next []string
		for _, prefix := range out {
			for _, v := range list {
				next = append(next, strings.Replace(prefix, "%s", v, 1))
			}
		}
		out = next
	}
	return out
}

// Every metric exists from start-up with its label sets at zero, so that
// dashboards and alerts see 0 rather than nothing: the agent's own label
// sets at once, and each plugin's as soon as the agent knows the plugin.
func TestEveryMetricExistsFromStartUpWithItsLabelSetsAtZero(t *testing.T) {
	dir := dataDir(t)
	a, err := agent.Start(agent.Config{DataDir: dir, Logger: probe.Logger(t), NodeID: "n1",
		FingerprintInterval: 50 * time.Millisecond, ResyncInterval: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Shutdown(context.Background())) })

	ops, results := []string{"register", "deregister"}, []string{"ok", "error"}
	atStart := append(product(`plugvisor_registry_operations_total{op="%s",result="%s"}`, ops, results),
		product(`plugvisor_registry_operation_seconds_count{op="%s"}`, ops)...)
	atStart = append(atStart, product(`plugvisor_mount_operations_total{op="%s",result="%s"}`,
		[]string{"mount", "unmount", "docker-mount", "docker-unmount"}, results)...)
	atStart = append(atStart, product(`plugvisor_discovered_plugins{health="%s",state="%s"}`,
		[]string{"healthy", "unhealthy", "unknown"}, []string{"activating", "registered", "failed", "invalid"})...)
	atStart = append(atStart, product(`plugvisor_kubelet_registrations_refused_total{reason="%s"}`, kubeletreg.Reasons)...)
	atStart = append(atStart, "plugvisor_registry_batch_writes_count", "plugvisor_registry_events_delivered_total")
	requireZero(t, scrape(t, a), atStart)

	serveHostpath(t, hostpath.Config{Name: "hp", NodeID: "n1", Root: filepath.Join(dir, "hp"),
		Mode: hostpath.ModeMonolith, SymlinkFallback: true}, filepath.Join(a.PluginDir(), "hp.sock"))
	serveLocalVolume(t, filepath.Join(dir, "vols"), filepath.Join(a.PluginDir(), "local.sock"))
	waitHealthy(t, a, "hp", "local")

	plugins := []string{`name="hp",type="csi-controller"`, `name="hp",type="csi-node"`, `name="local",type="docker-volume"`}
	var perPlugin []string
	for _, family := range []string{"plugvisor_instance_restarts_total", "plugvisor_instance_give_ups_total"} {
		perPlugin = append(perPlugin, product(family+"{%s}", plugins)...)
	}
	var series map[string]string
	require.Eventually(t, func() bool {
		series = scrape(t, a)
		for _, p := range plugins {
			if series[fmt.Sprintf("plugvisor_plugin_healthy{%s}", p)] != "1" {
				return false
			}
		}
		return true
	}, time.Minute, 10*time.Millisecond, "every plugin is checked healthy")
	requireZero(t, series, perPlugin)
	// A plugin's socket may appear a moment before it answers: its
	// failed activations exist, and may count one retry.
	for _, s := range product(`plugvisor_discovery_activation_failures_total{name="%s",then="%s"}`,
		[]string{"hp", "local"}, []string{"retry", "slow", "wait"}) {
		require.Contains(t, series, s)
	}
}
