package discovery

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	actorprobe "github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/messages"
)

// A plugin that deletes and recreates its socket (as many CSI drivers do
// when they start) is the same plugin: its discovered allocation is never
// deregistered or registered again, and so never takes over from a newer
// allocation of the same name registered through the API.
func TestASocketRecreated100TimesKeepsItsAllocationAndNeverTakesOver(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Grace = 5 * time.Second })
	socket := filepath.Join(e.sockets, "vol.sock")
	stop := volumePlugin(t, socket)
	discovered := e.registered(t, TypeDockerVolume, "vol")
	require.Equal(t, AllocID(socket), discovered.GetAllocId())
	e.await(t, "vol", messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_REGISTERED)

	newer := &messages.PluginInfo{Type: TypeDockerVolume, Name: "vol", AllocId: "api-2",
		Connection: &messages.ConnectionInfo{SocketPath: filepath.Join(e.root, "elsewhere.sock")}}
	require.NoError(t, e.registry.RegisterPlugin(newer))
	events := actorprobe.New(t, e.d.system)
	events.Send(e.registry.PID(), &messages.Subscribe{Type: TypeDockerVolume, Subscriber: events.PID()})
	actorprobe.Expect[*messages.Subscribed](t, events, wait)

	for i := range 100 {
		stop() // closing the listener removes the socket
		stop = volumePlugin(t, socket)
		// Each new socket is a new file: discovery activates it again and
		// finds its registration already there.
		actorprobe.FishFor(t, e.events, wait, func(m *messages.DiscoveredPluginChanged) bool {
			return m.GetPlugin().GetName() == "vol" && m.GetPlugin().GetState() == messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_ACTIVATING
		})
		e.await(t, "vol", messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_REGISTERED)
		current, ok := e.registry.Snapshot().Current(TypeDockerVolume, "vol")
		require.True(t, ok, "recreation %d: the plugin was deregistered", i)
		require.Equal(t, "api-2", current.GetAllocId(), "recreation %d: the discovered allocation took over", i)
	}
	events.ExpectNone(t, 200*time.Millisecond) // no registration, update or deregistration at all
	allocs := e.registry.Snapshot().Allocations(TypeDockerVolume, "vol")
	require.Len(t, allocs, 2, "the discovered allocation is still there, behind the newer one")
	require.NotContains(t, e.logs.String(), "plugin is gone")
}

// A plugin whose socket stays away past the grace period is gone.
func TestASocketGoneForLongerThanTheGracePeriodIsDeregistered(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Grace = 300 * time.Millisecond })
	stop := volumePlugin(t, filepath.Join(e.sockets, "vol.sock"))
	e.registered(t, TypeDockerVolume, "vol")
	stop()
	e.await(t, "vol", messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_GONE)
	e.deregistered(t, TypeDockerVolume, "vol")
}

// TestASocketBackAfterTheGracePeriodNeverOutranksANewerAllocation is issue
// 25's recipe: a newer allocation registered through the API after the
// plugin was discovered, then the plugin's socket away for longer than the
// grace period (the discovered allocation is deregistered), then back: the
// discovered allocation is registered again, behind the newer one, which
// stays current.
func TestASocketBackAfterTheGracePeriodNeverOutranksANewerAllocation(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Grace = 300 * time.Millisecond })
	socket := filepath.Join(e.sockets, "vol.sock")
	stop := volumePlugin(t, socket)
	e.registered(t, TypeDockerVolume, "vol")
	newer := &messages.PluginInfo{Type: TypeDockerVolume, Name: "vol", AllocId: "api-new",
		Connection: &messages.ConnectionInfo{SocketPath: filepath.Join(e.root, "elsewhere.sock")}}
	require.NoError(t, e.registry.RegisterPlugin(newer))

	stop()
	e.await(t, "vol", messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_GONE)
	require.Eventually(t, func() bool { return len(e.registry.Snapshot().Allocations(TypeDockerVolume, "vol")) == 1 }, wait, 10*time.Millisecond)
	stop = volumePlugin(t, socket)
	defer stop()
	e.await(t, "vol", messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_REGISTERED)
	require.Eventually(t, func() bool { return len(e.registry.Snapshot().Allocations(TypeDockerVolume, "vol")) == 2 }, wait, 10*time.Millisecond,
		"the discovered allocation is registered again")
	current, ok := e.registry.Snapshot().Current(TypeDockerVolume, "vol")
	require.True(t, ok)
	require.Equal(t, "api-new", current.GetAllocId(), "the returning discovered allocation took over from a newer one")
}
