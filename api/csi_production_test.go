package api_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
)

func TestCSIPluginsShowTheNewNodeIDOfAPluginRestartedOnItsSocket(t *testing.T) {
	dir := hostpathtest.TempDir(t)
	b, a := newCSIBackend(t, dir)
	plugin := serveHostpath(t, b, a, dir)
	got := serve(t, b.server.HandlerFor(unixListener), request{method: "GET", path: "/v1/csi/plugins"})
	require.Contains(t, got.body, `"node_id": "n1"`)

	// The plugin restarts on the same socket as another node: no agent restart.
	plugin.Driver.Stop()
	d, err := hostpath.New(hostpath.Config{Name: "hp", NodeID: "n2", Root: filepath.Join(dir, "hp"),
		Mode: hostpath.ModeMonolith, Logger: hostpathtest.Logger(t)})
	require.NoError(t, err)
	l, err := d.Listen(plugin.Endpoint)
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- d.Serve(l) }()
	t.Cleanup(func() {
		d.Stop()
		require.NoError(t, <-served)
	})

	require.Eventually(t, func() bool {
		got := serve(t, b.server.HandlerFor(unixListener), request{method: "GET", path: "/v1/csi/plugins"})
		return strings.Contains(got.body, `"node_id": "n2"`) && !strings.Contains(got.body, `"node_id": "n1"`)
	}, 20*time.Second, 20*time.Millisecond, "/v1/csi/plugins shows the restarted plugin's node ID")
}
