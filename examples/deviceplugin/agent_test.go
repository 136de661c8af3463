package deviceplugin_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/examples/deviceplugin"
	"github.com/plugvisor/plugvisor/messages"
)

// get reads path from the agent's API socket.
func get(t *testing.T, a *agent.Agent, path string) string {
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", a.SocketPath())
	}}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("http://plugvisor" + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func TestTheTypeRunsInTheShippedAgentShowsInHealthAndMetricsAndStopsBeforeTheRegistry(t *testing.T) {
	dir := socketDir(t)
	socket := filepath.Join(dir, "gpu.sock")
	serve(t, socket, "gpu0", "gpu1")
	var log probe.LogBuffer
	manager := deviceplugin.New(deviceplugin.Config{})
	a, err := agent.Start(agent.Config{DataDir: filepath.Join(dir, "data"), NodeID: "n1", FingerprintInterval: 20 * time.Millisecond,
		Logger:      hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: &log}),
		PluginTypes: []agent.PluginType{{Name: deviceplugin.Type, Manager: manager}}})
	require.NoError(t, err)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = a.Shutdown(context.Background())
		}
	})
	pr := probe.New(t, a.System())
	a.System().Root.Send(manager.PID(), &deviceplugin.Subscribe{Subscriber: pr.PID()})
	require.NoError(t, a.Registry().RegisterPlugin(&messages.PluginInfo{Type: deviceplugin.Type, Name: "gpu", AllocId: "a1",
		Connection: &messages.ConnectionInfo{SocketPath: socket}}))
	pr.ExpectAll(t, wait, report("a1", healthy))

	var h struct {
		Status      string                    `json:"status"`
		PluginTypes map[string]map[string]int `json:"plugin_types"`
	}
	require.NoError(t, json.Unmarshal([]byte(get(t, a, "/v1/health")), &h))
	require.Equal(t, "ok", h.Status)
	require.Equal(t, map[string]map[string]int{deviceplugin.Type: {"healthy": 1, "total": 1}}, h.PluginTypes)
	metrics := get(t, a, "/metrics")
	for _, series := range []string{`plugvisor_instance_restarts_total{name="gpu",type="device-plugin"} 0`,
		`plugvisor_instance_give_ups_total{name="gpu",type="device-plugin"} 0`,
		`plugvisor_plugin_healthy{name="gpu",type="device-plugin"} 1`} {
		require.Contains(t, metrics, series)
	}

	require.NoError(t, a.Shutdown(context.Background()))
	stopped = true
	// The instance was stopped, and said its last word, before the
	// registry shut down.
	pr.ExpectAll(t, wait, report("a1", final))
	lines := log.String()
	last := strings.Index(lines, `description="instance stopped"`)
	require.Positive(t, last, lines)
	require.Less(t, last, strings.Index(lines, "registry shut down"), lines)
}
