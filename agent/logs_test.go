package agent_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/dockervolume/localvolume"
	"github.com/plugvisor/plugvisor/messages"
)

// logTo returns a logger at debug level that writes to buf.
func logTo(buf *probe.LogBuffer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "plugvisor", Level: hclog.Debug, Output: buf})
}

// troubleLines returns the lines of log that cry trouble: warnings,
// errors and dead letters.
func troubleLines(log string) []string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "[WARN]") || strings.Contains(line, "[ERROR]") || strings.Contains(line, "DeadLetter") {
			out = append(out, line)
		}
	}
	return out
}

// serveLocalVolume serves the reference Docker volume plugin at socket
// until the test ends.
func serveLocalVolume(t *testing.T, root, socket string) {
	t.Helper()
	d, err := localvolume.New(root, hclog.NewNullLogger())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- localvolume.Serve(ctx, d, socket) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-served) })
}

// serveHostpath serves the reference CSI plugin at socket until the test
// ends.
func serveHostpath(t *testing.T, cfg hostpath.Config, socket string) {
	t.Helper()
	cfg.Logger = hostpathtest.Logger(t)
	d, err := hostpath.New(cfg)
	require.NoError(t, err)
	l, err := d.Listen(socket)
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- d.Serve(l) }()
	t.Cleanup(func() { d.Stop(); require.NoError(t, <-served) })
}

// waitHealthy waits until every plugin named is discovered, registered and
// healthy.
func waitHealthy(t *testing.T, a *agent.Agent, names ...string) {
	t.Helper()
	require.Eventually(t, func() bool {
		healthy := map[string]bool{}
		for _, p := range a.Plugins() {
			healthy[p.GetName()] = p.GetHealth() == "healthy" &&
				p.GetState() == messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_REGISTERED
		}
		for _, n := range names {
			if !healthy[n] {
				return false
			}
		}
		return true
	}, time.Minute, 10*time.Millisecond, "discovered: %v", a.Plugins())
}

// A clean shutdown of an agent serving a CSI plugin and a Docker volume
// plugin is no trouble: the last resync that stops every instance is not
// a correction, the catalog does not mourn the CSI manager, and nobody
// writes to an actor that has stopped.
func TestACleanShutdownLogsNoWarningsAndNoDeadLetters(t *testing.T) {
	dir := dataDir(t)
	var log probe.LogBuffer
	a, err := agent.Start(agent.Config{DataDir: dir, Logger: logTo(&log), NodeID: "n1",
		FingerprintInterval: 50 * time.Millisecond, ResyncInterval: time.Second})
	require.NoError(t, err)
	serveHostpath(t, hostpath.Config{Name: "hp", NodeID: "n1", Root: filepath.Join(dir, "hp"),
		Mode: hostpath.ModeMonolith, SymlinkFallback: true}, filepath.Join(a.PluginDir(), "hp.sock"))
	serveLocalVolume(t, filepath.Join(dir, "vols"), filepath.Join(a.PluginDir(), "local.sock"))
	waitHealthy(t, a, "hp", "local")

	require.NoError(t, a.Shutdown(context.Background()))
	require.Contains(t, log.String(), "agent stopped")
	require.Empty(t, troubleLines(log.String()), "the whole log:\n%s", log.String())
}
