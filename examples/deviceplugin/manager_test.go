package deviceplugin_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/examples/deviceplugin"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/supervisor"
)

// TestMain fails the package if anything outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait is generous: the machine may be loaded.
const wait = 20 * time.Second

// counts is the agent.TypeMetrics of a test.
type counts struct {
	mu                 sync.Mutex
	restarts, giveUps  int
	healthy, unhealthy int
}

func (c *counts) InstanceRestarting(*messages.PluginInfo) { c.mu.Lock(); c.restarts++; c.mu.Unlock() }
func (c *counts) InstanceGaveUp(*messages.PluginInfo)     { c.mu.Lock(); c.giveUps++; c.mu.Unlock() }
func (c *counts) PluginHealth(_, _ string, healthy bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if healthy {
		c.healthy++
	} else {
		c.unhealthy++
	}
}

func (c *counts) get() (restarts, giveUps int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.restarts, c.giveUps
}

// socketDir is a short directory for unix sockets (sun_path holds 107 bytes).
func socketDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "dp")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// serve starts a fake device plugin, stopped at the test's end.
func serve(t *testing.T, socket string, devices ...string) *deviceplugin.Plugin {
	p, err := deviceplugin.Serve(socket, devices...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

// fixture is a registry with the device-plugin type on it, and a probe
// that hears every DeviceHealth.
type fixture struct {
	reg     *registry.Registry
	manager *deviceplugin.Manager
	probe   *probe.Probe
	metrics *counts
	dir     string
}

func start(t *testing.T, cfg deviceplugin.Config) *fixture {
	dir := socketDir(t)
	reg, err := registry.Open(filepath.Join(dir, "state.db"), registry.OpenOptions{Config: registry.Config{Logger: probe.Logger(t)}})
	require.NoError(t, err)
	f := &fixture{reg: reg, manager: deviceplugin.New(cfg), metrics: &counts{}, dir: dir}
	require.NoError(t, f.manager.Start(agent.TypeEnv{Type: deviceplugin.Type, System: reg.System(), Registry: reg,
		Logger: probe.Logger(t), ResyncInterval: time.Minute, HealthInterval: 20 * time.Millisecond, Metrics: f.metrics}))
	t.Cleanup(func() {
		require.NoError(t, f.manager.Shutdown(context.Background()))
		require.NoError(t, reg.Close())
	})
	f.probe = probe.New(t, reg.System())
	reg.System().Root.Send(f.manager.PID(), &deviceplugin.Subscribe{Subscriber: f.probe.PID()})
	return f
}

// register registers alloc of the plugin gpu, served at socket.
func (f *fixture) register(t *testing.T, alloc, socket string) {
	require.NoError(t, f.reg.RegisterPlugin(&messages.PluginInfo{Type: deviceplugin.Type, Name: "gpu", AllocId: alloc,
		Connection: &messages.ConnectionInfo{SocketPath: socket}}))
}

func report(alloc string, match func(*deviceplugin.DeviceHealth) bool) probe.Matcher {
	return probe.Match(func(h *deviceplugin.DeviceHealth) bool { return h.AllocID == alloc && match(h) })
}

func healthy(h *deviceplugin.DeviceHealth) bool { return h.Healthy }
func final(h *deviceplugin.DeviceHealth) bool   { return h.Final }

func TestAnInstanceReportsItsPluginsDevicesAndTheManagerListsThem(t *testing.T) {
	f := start(t, deviceplugin.Config{})
	socket := filepath.Join(f.dir, "gpu.sock")
	serve(t, socket, "gpu0", "gpu1")
	f.register(t, "a1", socket)

	h := f.probe.ExpectAll(t, wait, report("a1", healthy))[0].(*deviceplugin.DeviceHealth)
	require.Equal(t, []string{"gpu0", "gpu1"}, h.Devices)
	require.Equal(t, []agent.InstanceHealth{{Name: "gpu", Healthy: true, Description: "2 devices"}}, f.manager.Instances())
}

func TestANewerAllocationTakesOverAndTheOldInstanceSaysItsLastWord(t *testing.T) {
	f := start(t, deviceplugin.Config{})
	old, newer := filepath.Join(f.dir, "a1.sock"), filepath.Join(f.dir, "a2.sock")
	serve(t, old, "gpu0")
	serve(t, newer, "gpu0", "gpu1")
	f.register(t, "a1", old)
	f.probe.ExpectAll(t, wait, report("a1", healthy))

	f.register(t, "a2", newer)
	// The old instance's last report and the new one's first come from
	// two actors: in either order.
	got := f.probe.ExpectAll(t, wait, report("a1", final), report("a2", healthy))
	require.Equal(t, deviceplugin.StoppedDescription, got[0].(*deviceplugin.DeviceHealth).Description)
	require.Equal(t, []agent.InstanceHealth{{Name: "gpu", Healthy: true, Description: "2 devices"}}, f.manager.Instances())
}

func TestAnUnhealthyPluginIsRestartedThenGivenUpUntilTheRegistrySaysSomethingNew(t *testing.T) {
	f := start(t, deviceplugin.Config{Supervision: supervisor.Spec{MaxRestarts: 2, Within: time.Minute,
		InitialDelay: 10 * time.Millisecond, MaxDelay: 20 * time.Millisecond}})
	socket := filepath.Join(f.dir, "gpu.sock")
	p := serve(t, socket, "gpu0")
	p.SetHealth(false, "fan failure")
	f.register(t, "a1", socket)

	got := f.probe.ExpectAll(t, wait, report("a1", func(h *deviceplugin.DeviceHealth) bool {
		return h.Final && h.Instance == nil
	}))[0].(*deviceplugin.DeviceHealth)
	require.Contains(t, got.Description, "plugin says it is unhealthy: fan failure")
	require.Contains(t, got.Description, "gave up after 2 restarts")
	restarts, giveUps := f.metrics.get()
	require.Equal(t, 2, restarts)
	require.Equal(t, 1, giveUps)
	require.False(t, f.manager.Instances()[0].Healthy)

	// A new allocation is news: it gets an instance again.
	p.SetHealth(true, "")
	f.register(t, "a2", socket)
	f.probe.ExpectAll(t, wait, report("a2", healthy))
	require.True(t, f.manager.Instances()[0].Healthy)
}

func TestAPluginThatIsNotThereFailsItsCheck(t *testing.T) {
	f := start(t, deviceplugin.Config{Supervision: supervisor.Spec{MaxRestarts: 1, Within: time.Minute,
		InitialDelay: 10 * time.Millisecond}})
	f.register(t, "a1", filepath.Join(f.dir, "nobody.sock"))
	got := f.probe.ExpectAll(t, wait, report("a1", func(h *deviceplugin.DeviceHealth) bool { return !h.Healthy }))
	require.True(t, strings.HasPrefix(got[0].(*deviceplugin.DeviceHealth).Description, "health check failed: "),
		got[0].(*deviceplugin.DeviceHealth).Description)
}
