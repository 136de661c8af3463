package agent_test

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/messages"
)

// TestAMountedVolumesStatsAreGaugesNamedLikeKubeletsUntilItIsUnmounted
// mounts a volume of the reference plugin (which advertises
// GET_VOLUME_STATS) on an agent asking every 50ms: its
// plugvisor_volume_stats_* series appear, labelled by namespace, volume
// and plugin, and are gone once it is unmounted.
func TestAMountedVolumesStatsAreGaugesNamedLikeKubeletsUntilItIsUnmounted(t *testing.T) {
	dir := dataDir(t)
	a, err := agent.Start(agent.Config{DataDir: dir, Logger: probe.Logger(t), NodeID: "n1",
		FingerprintInterval: 50 * time.Millisecond, ResyncInterval: time.Second, VolumeStatsInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Shutdown(context.Background())) })
	registerHostpath(t, a, dir)
	c := unixClient(t, a)
	do := func(method, path, body string, want int) {
		t.Helper()
		code, got, err := call(c, method, "http://plugvisor"+path, "", body)
		require.NoError(t, err)
		require.Equal(t, want, code, "%s %s answered %s", method, path, got)
	}
	do("POST", "/v1/volumes/default/db/create",
		`{"plugin_id": "hp", "capacity": {"required_bytes": 1048576}, "access_mode": "single-node-writer"}`, http.StatusCreated)
	require.Eventually(t, func() bool {
		v, err := a.Catalog().GetVolume(context.Background(), "default", "db")
		return err == nil && v.Schedulable
	}, 20*time.Second, 10*time.Millisecond)
	do("POST", "/v1/volumes/default/db/mount", `{"alloc_id": "web-1"}`, http.StatusOK)

	labels := `{namespace="default",plugin="hp",volume="db"}`
	names := []string{"capacity_bytes", "available_bytes", "used_bytes", "inodes", "inodes_free", "inodes_used"}
	var series map[string]string
	require.Eventually(t, func() bool {
		series = scrape(t, a)
		_, ok := series["plugvisor_volume_stats_capacity_bytes"+labels]
		return ok
	}, 20*time.Second, 20*time.Millisecond, "the periodic stats reach the metrics")
	for _, name := range names {
		require.Contains(t, series, "plugvisor_volume_stats_"+name+labels)
	}
	require.NotEqual(t, "0", series["plugvisor_volume_stats_capacity_bytes"+labels])

	do("POST", "/v1/volumes/default/db/unmount", `{"alloc_id": "web-1"}`, http.StatusOK)
	series = scrape(t, a)
	for _, name := range append(names, "health_status_abnormal") {
		require.NotContains(t, series, "plugvisor_volume_stats_"+name+labels, "an unmounted volume has no series")
	}
}

// registerHostpath serves the reference plugin "hp" (node n1, root under
// dir) and registers it with a as controller and node.
func registerHostpath(t *testing.T, a *agent.Agent, dir string) {
	t.Helper()
	plugin := hostpathtest.Serve(t, hostpath.Config{Name: "hp", NodeID: "n1", Root: filepath.Join(dir, "hp"),
		Mode: hostpath.ModeMonolith, SymlinkFallback: true})
	for _, ptype := range []string{csi.TypeController, csi.TypeNode} {
		require.NoError(t, a.Registry().RegisterPlugin(&messages.PluginInfo{Type: ptype, Name: "hp", AllocId: "a1",
			Connection: &messages.ConnectionInfo{SocketPath: plugin.Endpoint}}))
	}
}
