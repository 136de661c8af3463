package agent_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/messages"
)

func TestTheAgentsLimitsReachTheRegistry(t *testing.T) {
	dir := dataDir(t)
	a, err := agent.Start(agent.Config{DataDir: dir, Logger: probe.Logger(t), NodeID: "n1",
		MaxPluginsPerType: 1, MaxPluginOptionsBytes: 10, MaxSubscribers: 1})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Shutdown(context.Background())) })
	first := &messages.PluginInfo{Type: "csi-node", Name: "p", AllocId: "a1",
		Connection: &messages.ConnectionInfo{SocketPath: "/run/p.sock"}}
	require.NoError(t, a.Registry().RegisterPlugin(first))

	second := proto.Clone(first).(*messages.PluginInfo)
	second.AllocId = "a2"
	require.ErrorContains(t, a.Registry().RegisterPlugin(second), "-max-plugins-per-type")

	first.Options = map[string]string{"key": "a value too long"}
	require.ErrorContains(t, a.Registry().RegisterPlugin(first), "-max-plugin-options-bytes")
	require.Len(t, a.Registry().ListPlugins(""), 1)

	// One event stream is open; a second is refused until it closes.
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", a.SocketPath())
	}}}
	t.Cleanup(client.CloseIdleConnections)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://plugvisor/v1/events", nil)
	require.NoError(t, err)
	stream, err := client.Do(req)
	require.NoError(t, err)
	defer stream.Body.Close()
	require.Equal(t, http.StatusOK, stream.StatusCode)

	refused, err := client.Get("http://plugvisor/v1/events")
	require.NoError(t, err)
	defer refused.Body.Close()
	body, err := io.ReadAll(refused.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusTooManyRequests, refused.StatusCode)
	require.Contains(t, string(body), "-max-subscribers")
}

func TestTheVolumeLimitReachesTheCatalogAndTheAPIAnswers429(t *testing.T) {
	a, err := agent.Start(agent.Config{DataDir: dataDir(t), Logger: probe.Logger(t), NodeID: "n1", MaxVolumes: 1})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Shutdown(context.Background())) })
	client := unixClient(t, a)
	register := func(id string) (int, string) {
		body := `{"id":"` + id + `","plugin_id":"hostpath","access_mode":"single-node-writer","attachment_mode":"file-system"}`
		resp, err := client.Post("http://plugvisor/v1/volumes", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(out)
	}
	status, body := register("first")
	require.Equal(t, http.StatusOK, status, body)
	status, body = register("second")
	require.Equal(t, http.StatusTooManyRequests, status)
	require.Contains(t, body, "-max-volumes")
	status, body = register("first")
	require.Equal(t, http.StatusOK, status, "a volume already there can be registered again: %s", body)
}

// TestAWriteTimeoutNotAboveTheOperationTimeoutIsRefused: the HTTP write
// timeout bounds a mount's answer, so one that a volume operation could
// outlive is refused, naming both; left 0, it outlives the operation.
func TestAWriteTimeoutNotAboveTheOperationTimeoutIsRefused(t *testing.T) {
	_, err := agent.Start(agent.Config{DataDir: dataDir(t), Logger: probe.Logger(t), NodeID: "n1",
		VolumeOperationTimeout: 10 * time.Minute, HTTPLimits: agent.HTTPLimits{WriteTimeout: 5 * time.Minute}})
	require.ErrorIs(t, err, agent.ErrInvalidConfig)
	require.ErrorContains(t, err, "HTTPLimits.WriteTimeout is 5m0s, not above the volume operation timeout 10m0s (flag -volume-op-timeout)")
	a, err := agent.Start(agent.Config{DataDir: dataDir(t), Logger: probe.Logger(t), NodeID: "n1", VolumeOperationTimeout: 10 * time.Minute})
	require.NoError(t, err)
	require.NoError(t, a.Shutdown(context.Background()))
}
