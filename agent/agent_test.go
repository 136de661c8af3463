package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/messages"
)

// TestMain fails the package if any goroutine outlives the tests: an agent
// that shuts down leaves nothing running.
// TestMain runs the tests, or an etcd member when a test started the
// binary for one (etcdtest.StartProcess). protoactor's cluster leaves its
// gossip throttles' goroutines running after a cluster-mode agent stops;
// they hold nothing of the agent's.
func TestMain(m *testing.M) {
	etcdtest.RunIfChild()
	hostpathtest.Main(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/cluster.NewGossipActor.NewThrottleWithLogger.func2.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/cluster.(*Gossiper).StartGossiping.NewThrottle.func3.1"))
}

// dataDir is an agent's data directory for one test: short enough for
// its sockets, and removed after the test with every mount the agent left
// below it (an agent's stop keeps its mounts for its next start).
func dataDir(t testing.TB) string {
	t.Helper()
	return hostpathtest.TempDir(t)
}

func startAgent(t testing.TB, dir string) *agent.Agent {
	t.Helper()
	a, err := agent.Start(agent.Config{DataDir: dir, Logger: probe.Logger(t), NodeID: "n1",
		FingerprintInterval: 50 * time.Millisecond, ResyncInterval: time.Second})
	require.NoError(t, err)
	return a
}

// mountsUnder lists the mount points below dir, from /proc/self/mountinfo.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir) {
			out = append(out, f[4])
		}
	}
	return out
}

// serveHP serves the hostpath plugin hp as a monolith, its root under
// dir, and registers it with a (controller and node) as alloc.
func serveHP(t testing.TB, a *agent.Agent, dir, alloc string) *hostpathtest.Server {
	t.Helper()
	plugin := hostpathtest.Serve(t, hostpath.Config{Name: "hp", NodeID: "n1", Root: filepath.Join(dir, "hp"),
		Mode: hostpath.ModeMonolith, SymlinkFallback: true})
	for _, ptype := range []string{csi.TypeController, csi.TypeNode} {
		require.NoError(t, a.Registry().RegisterPlugin(&messages.PluginInfo{Type: ptype, Name: "hp", AllocId: alloc,
			Connection: &messages.ConnectionInfo{SocketPath: plugin.Endpoint}}))
	}
	return plugin
}

func TestAnAgentMountsThenShutsDownLeavingNothingBehind(t *testing.T) {
	dir := dataDir(t)
	a := startAgent(t, dir)
	plugin := serveHP(t, a, dir, "a1")
	ctx := context.Background()
	require.Eventually(t, func() bool {
		for _, fp := range a.CSI().Plugins() {
			if fp.GetType() == csi.TypeNode && fp.GetHealthy() {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond)
	vol := createVolume(t, a, plugin.Endpoint)

	res, err := a.Volumes().Mount(ctx, vol.Namespace, vol.ID, "web-1", false)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(res.TargetPath, "f"), []byte("x"), 0o644))
	_, err = a.Volumes().Mount(ctx, vol.Namespace, vol.ID, "web-2", false)
	require.ErrorIs(t, err, volumes.ErrClaimRefused, "a second writer is refused through the real mount path")

	// The agent restarts with the volume mounted: the new one unmounts it
	// from its durable record.
	require.NoError(t, a.Shutdown(ctx))
	require.NotEmpty(t, mountsUnder(t, dir), "an agent shutdown leaves volumes mounted")
	a = startAgent(t, dir)
	require.NoError(t, a.Volumes().Unmount(ctx, vol.Namespace, vol.ID, "web-1"))
	got, err := a.Catalog().GetVolume(ctx, vol.Namespace, vol.ID)
	require.NoError(t, err)
	require.Empty(t, got.WriteClaims, "the unmount after the restart released the claim")
	require.NoError(t, a.Shutdown(ctx))
	require.Empty(t, mountsUnder(t, dir), "no mount is left under the data dir")
	_, err = os.Stat(a.SocketPath())
	require.ErrorIs(t, err, os.ErrNotExist, "the API socket is removed")
}

func TestASecondAgentOnTheDataDirIsRefusedPromptly(t *testing.T) {
	dir := dataDir(t)
	first := startAgent(t, dir)
	t.Cleanup(func() { require.NoError(t, first.Shutdown(context.Background())) })
	_, err := agent.Start(agent.Config{DataDir: dir, LockTimeout: 50 * time.Millisecond})
	require.ErrorIs(t, err, agent.ErrAlreadyRunning)
	require.ErrorContains(t, err, dir)
}

func TestADataDirTooLongForTheAPISocketIsAClearError(t *testing.T) {
	dir := filepath.Join(dataDir(t), strings.Repeat("d", 100))
	_, err := agent.Start(agent.Config{DataDir: dir})
	require.ErrorContains(t, err, "use a shorter data dir")
}

func TestStateSurvivesARestart(t *testing.T) {
	dir := dataDir(t)
	a := startAgent(t, dir)
	info, err := os.Stat(a.SocketPath())
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "only the agent's user may use the API socket")
	require.NoError(t, a.Registry().RegisterPlugin(&messages.PluginInfo{Type: "csi-node", Name: "p", AllocId: "a1",
		Connection: &messages.ConnectionInfo{SocketPath: "/run/p.sock"}}))
	require.NoError(t, a.Shutdown(context.Background()))
	b := startAgent(t, dir)
	t.Cleanup(func() { require.NoError(t, b.Shutdown(context.Background())) })
	require.Len(t, b.Registry().ListPlugins("csi-node"), 1)
}
