package registry_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/messages"
)

// TestAnAllocationBackAfterAnAbsenceKeepsItsPlaceInTime is issue 25's
// first behaviour at the registry: a discovered allocation that goes away
// and comes back (the same alloc ID, as discovery derives it from the
// socket) is never newer than an allocation registered after it first
// was; one registered before it, it outranks again, as it did.
func TestAnAllocationBackAfterAnAbsenceKeepsItsPlaceInTime(t *testing.T) {
	r, system := newRegistry(t)
	p := probe.New(t, system)
	subscribe(t, r, p, csiNode, false)
	alloc := func(id, socket string) *messages.PluginInfo {
		return &messages.PluginInfo{Type: csiNode, Name: "hp", AllocId: id, Connection: &messages.ConnectionInfo{SocketPath: socket}}
	}
	current := func() string {
		info, ok := r.Snapshot().Current(csiNode, "hp")
		require.True(t, ok)
		return info.GetAllocId()
	}

	require.NoError(t, r.RegisterPlugin(alloc("disc-1", "/run/hp.sock")))
	probe.Expect[*messages.PluginRegistered](t, p, timeout)
	require.NoError(t, r.RegisterPlugin(alloc("api-new", "/run/hp-new.sock")))
	probe.Expect[*messages.PluginRegistered](t, p, timeout)
	require.NoError(t, r.DeregisterPlugin(csiNode, "hp", "disc-1"))
	probe.Expect[*messages.PluginDeregistered](t, p, timeout)

	require.NoError(t, r.RegisterPlugin(alloc("disc-1", "/run/hp.sock")))
	back := probe.Expect[*messages.PluginUpdated](t, p, timeout)
	require.False(t, back.GetIsCurrent(), "the returning allocation takes nothing over")
	require.Nil(t, back.GetPrevious())
	require.Equal(t, "api-new", current())

	// The other way round: registered before the returning one first was,
	// an allocation is outranked by it again.
	require.NoError(t, r.DeregisterPlugin(csiNode, "hp", "api-new"))
	probe.Expect[*messages.PluginDeregistered](t, p, timeout)
	require.Equal(t, "disc-1", current())
	require.NoError(t, r.DeregisterPlugin(csiNode, "hp", "disc-1"))
	probe.Expect[*messages.PluginDeregistered](t, p, timeout)
	require.NoError(t, r.RegisterPlugin(alloc("api-old", "/run/hp-old.sock")))
	probe.Expect[*messages.PluginRegistered](t, p, timeout)
	require.NoError(t, r.RegisterPlugin(alloc("disc-2", "/run/hp2.sock")))
	probe.Expect[*messages.PluginRegistered](t, p, timeout)
	require.NoError(t, r.DeregisterPlugin(csiNode, "hp", "disc-2"))
	probe.Expect[*messages.PluginDeregistered](t, p, timeout)
	require.Equal(t, "api-old", current())
	require.NoError(t, r.RegisterPlugin(alloc("disc-2", "/run/hp2.sock")))
	taken := probe.Expect[*messages.PluginRegistered](t, p, timeout)
	require.Equal(t, "api-old", taken.GetPrevious().GetAllocId(), "back, it outranks the allocation registered before it first was")
	require.Equal(t, "disc-2", current())
}
