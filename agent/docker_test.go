package agent_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/dockervolume/localvolume"
	"github.com/plugvisor/plugvisor/messages"
)

// A Docker volume plugin dropped into the plugin dir shows in the agent's
// discovered plugins with its health, in /v1/health and in the metrics;
// the volume service mounts through it.
func TestADockerVolumePluginIsDiscoveredCheckedCountedAndServesVolumes(t *testing.T) {
	dir := dataDir(t)
	a := startAgent(t, dir)
	t.Cleanup(func() { require.NoError(t, a.Shutdown(context.Background())) })
	d, err := localvolume.New(filepath.Join(dir, "vols"), hclog.NewNullLogger())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- localvolume.Serve(ctx, d, filepath.Join(a.PluginDir(), "local.sock")) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-served) })

	require.Eventually(t, func() bool {
		for _, p := range a.Plugins() {
			if p.GetName() == "local" && p.GetHealth() == "healthy" &&
				p.GetState() == messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_REGISTERED {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "discovered: %v", a.Plugins())

	_, err = a.DockerVolumeService().Create(context.Background(), "data", "local", nil)
	require.NoError(t, err)
	mp, err := a.DockerVolumeService().Mount(context.Background(), "data", "c1")
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, "vols", "data"), mp)
	require.NoError(t, a.DockerVolumeService().Unmount(context.Background(), "data", "c1"))

	series := scrape(t, a)
	require.Equal(t, "1", series[`plugvisor_plugin_healthy{name="local",type="docker-volume"}`])
	require.Equal(t, "1", series[`plugvisor_discovered_plugins{health="healthy",state="registered"}`])
}
