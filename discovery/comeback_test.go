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
