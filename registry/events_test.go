package registry_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
)

// restartable runs registries one after another on the same store, as an
// agent restarting on its state file does.
func restartable(t *testing.T) func() *registry.Registry {
	bucket := memoryBucket(t)
	var last *registry.Registry
	return func() *registry.Registry {
		t.Helper()
		if last != nil {
			require.NoError(t, last.Shutdown())
		}
		r, err := registry.New(probe.NewSystem(t), registry.Config{Bucket: bucket, Logger: probe.Logger(t)})
		require.NoError(t, err)
		last = r
		t.Cleanup(func() { require.NoError(t, r.Shutdown()) })
		return r
	}
}

func TestTheSequenceNeverGoesBackwardsAcrossARestart(t *testing.T) {
	next := restartable(t)
	r := next()
	for i := range 3 {
		require.NoError(t, r.RegisterPlugin(plugin(i)))
	}
	require.NoError(t, r.DeregisterPlugin(csiNode, "my-plugin", "alloc-2"))
	require.NoError(t, r.DeregisterPlugin(csiNode, "my-plugin", "alloc-1"))
	require.Equal(t, uint64(5), r.Snapshot().Sequence())

	r = next()
	require.Equal(t, uint64(5), r.Snapshot().Sequence(), "the restarted registry resumes at the last sequence")
	sub, err := r.Subscribe(context.Background(), csiNode, registry.SubscribeOptions{})
	require.NoError(t, err)
	require.Equal(t, uint64(5), sub.Sequence)
	require.NoError(t, r.RegisterPlugin(plugin(3)))
	require.Equal(t, uint64(6), receive(t, sub.C).GetSequence(), "the next event follows the last one before the restart")
}

func TestReplayedEventsCarryTheirOwnSequence(t *testing.T) {
	next := restartable(t)
	r := next()
	require.NoError(t, r.RegisterPlugin(pluginNamed("a", 0))) // 1
	require.NoError(t, r.RegisterPlugin(pluginNamed("b", 0))) // 2
	updated := pluginNamed("a", 0)
	updated.Version = "v9"
	require.NoError(t, r.RegisterPlugin(updated))             // 3
	require.NoError(t, r.RegisterPlugin(pluginNamed("c", 0))) // 4
	require.NoError(t, r.DeregisterPlugin(csiNode, "c", "alloc-0"))

	replayed := func(r *registry.Registry) map[string]uint64 {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		sub, err := r.Subscribe(ctx, csiNode, registry.SubscribeOptions{Replay: true})
		require.NoError(t, err)
		require.Equal(t, uint64(5), sub.Sequence)
		got := map[string]uint64{}
		for range 2 {
			ev := receive(t, sub.C)
			require.IsType(t, &messages.PluginRegistered{}, ev)
			got[ev.GetPlugin().GetName()] = ev.GetSequence()
		}
		return got
	}
	want := map[string]uint64{"a": 3, "b": 2}
	require.Equal(t, want, replayed(r), "each replayed plugin carries the sequence of its last change")
	require.Equal(t, want, replayed(next()), "and keeps it across a restart")
}

func TestReplayInBatchesForActors(t *testing.T) {
	r, system := newRegistry(t)
	require.NoError(t, r.RegisterPlugin(pluginNamed("a", 0)))
	require.NoError(t, r.RegisterPlugin(pluginNamed("b", 0)))
	p := probe.New(t, system)
	p.Send(r.PID(), &registry.SubscribeInBatches{
		Subscribe: &messages.Subscribe{Type: csiNode, Subscriber: p.PID(), Replay: true},
	})
	ack := probe.Expect[*messages.Subscribed](t, p, timeout)
	require.Empty(t, ack.GetCurrent(), "the state comes as events")
	replay := probe.Expect[*registry.Events](t, p, timeout)
	require.True(t, replay.Replayed)
	require.Len(t, replay.Events, 2)
	require.Equal(t, uint64(1), replay.Events[0].GetSequence())
	require.Equal(t, uint64(2), replay.Events[1].GetSequence())

	require.NoError(t, r.RegisterPlugin(pluginNamed("c", 0)))
	live := probe.Expect[*registry.Events](t, p, timeout)
	require.False(t, live.Replayed)
	require.Len(t, live.Events, 1)
	require.Equal(t, "c", live.Events[0].GetPlugin().GetName())
}

func TestAChannelSaysWhyItClosed(t *testing.T) {
	t.Run("its reader fell behind", func(t *testing.T) {
		r, _ := newRegistry(t)
		sub, err := r.Subscribe(context.Background(), csiNode, registry.SubscribeOptions{MaxBacklog: 2})
		require.NoError(t, err)
		require.NoError(t, sub.Err(), "open")
		for i := range 6 {
			require.NoError(t, r.RegisterPlugin(pluginNamed("p", i)))
		}
		requireClosed(t, sub.C)
		require.ErrorIs(t, sub.Err(), registry.ErrLagged)
		require.ErrorIs(t, sub.Err(), errclass.Limit)
		require.True(t, sub.Lagged())
	})
	t.Run("its context was cancelled", func(t *testing.T) {
		r, _ := newRegistry(t)
		ctx, cancel := context.WithCancel(context.Background())
		sub, err := r.Subscribe(ctx, csiNode, registry.SubscribeOptions{})
		require.NoError(t, err)
		cancel()
		requireClosed(t, sub.C)
		require.ErrorIs(t, sub.Err(), context.Canceled)
		require.NotErrorIs(t, sub.Err(), registry.ErrLagged)
	})
	t.Run("the registry shut down", func(t *testing.T) {
		system := probe.NewSystem(t)
		bucket, err := storage.NewMemory().Bucket(registry.BucketName)
		require.NoError(t, err)
		r, err := registry.New(system, registry.Config{Bucket: bucket})
		require.NoError(t, err)
		sub, err := r.Subscribe(context.Background(), csiNode, registry.SubscribeOptions{})
		require.NoError(t, err)
		require.NoError(t, r.Shutdown())
		requireClosed(t, sub.C)
		require.ErrorIs(t, sub.Err(), registry.ErrShutdown)
	})
}
