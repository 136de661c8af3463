package registry_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
)

func TestAConfigNamesOneStore(t *testing.T) {
	system := probe.NewSystem(t)
	for name, cfg := range map[string]registry.Config{
		"neither": {},
		"both":    {Bucket: memoryBucket(t), Memory: registry.NewMemoryStore()},
	} {
		_, err := registry.New(system, cfg)
		require.ErrorIs(t, err, registry.ErrInvalid, name)
		require.ErrorContains(t, err, "Config.Bucket or Config.Memory", name)
	}
}

func TestARegistryStartsFromTheStateItsMemoryStoreKept(t *testing.T) {
	system := probe.NewSystem(t)
	store := registry.NewMemoryStore()
	first, err := registry.New(system, registry.Config{Memory: store, Name: "first"})
	require.NoError(t, err)
	for i := range 3 {
		require.NoError(t, first.RegisterPlugin(plugin(i)))
	}
	require.NoError(t, first.DeregisterPlugin(csiNode, "my-plugin", "alloc-2"))
	seq := first.Snapshot().Sequence()
	require.NoError(t, first.Shutdown())

	second := startWith(t, system, registry.Config{Memory: store, Name: "second", Dispensers: echoDispensers()})
	require.Equal(t, seq, second.Snapshot().Sequence(), "the sequence goes on from where the first registry left it")
	require.Equal(t, "alloc-1", dispense(t, second).GetAllocId())
	require.Len(t, second.Snapshot().Allocations(csiNode, "my-plugin"), 2)

	// The second registry's writes never change what the first one's
	// snapshots showed.
	before := second.Snapshot()
	require.NoError(t, second.DeregisterPlugin(csiNode, "my-plugin", "alloc-1"))
	require.Len(t, before.Allocations(csiNode, "my-plugin"), 2)
	require.Equal(t, "alloc-0", dispense(t, second).GetAllocId())
}

// TestActorCommandsCommitToMemory: commands sent to the PID by an actor,
// pipelined, are answered in order and their events delivered in order,
// with a store that commits on the actor's own goroutine.
func TestActorCommandsCommitToMemory(t *testing.T) {
	r, system := newRegistry(t)
	sub := probe.New(t, system)
	subscribe(t, r, sub, csiNode, false)
	caller := probe.New(t, system)
	for i := range 20 {
		caller.Send(r.PID(), &messages.RegisterPlugin{Plugin: plugin(i), ReplyTo: caller.PID()})
	}
	for range 20 {
		require.Nil(t, probe.Expect[*messages.RegisterPluginResponse](t, caller, timeout).GetError())
	}
	var last uint64
	for i := range 20 {
		ev := probe.Expect[*messages.PluginRegistered](t, sub, timeout)
		require.Equal(t, plugin(i).GetAllocId(), ev.GetPlugin().GetAllocId())
		require.Greater(t, ev.GetSequence(), last)
		last = ev.GetSequence()
	}
	require.Equal(t, "alloc-19", dispense(t, r).GetAllocId())
}
