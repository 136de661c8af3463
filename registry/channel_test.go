package registry_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
)

func receive(t *testing.T, ch <-chan registry.Event) registry.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		require.True(t, ok, "channel closed early")
		return ev
	case <-time.After(timeout):
		t.Fatal("no event on the channel")
		return nil
	}
}

func requireClosed(t *testing.T, ch <-chan registry.Event) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("channel did not close")
		}
	}
}

func TestPluginsUpdatedChDeliversInOrder(t *testing.T) {
	r, _ := newRegistry(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := r.PluginsUpdatedCh(ctx, csiNode)

	require.NoError(t, r.RegisterPlugin(plugin(0)))
	require.NoError(t, r.RegisterPlugin(plugin(1)))
	require.NoError(t, r.DeregisterPlugin(csiNode, "my-plugin", "alloc-0"))

	first := receive(t, ch)
	require.IsType(t, &messages.PluginRegistered{}, first)
	second := receive(t, ch)
	require.Equal(t, "alloc-1", second.GetPlugin().GetAllocId())
	third := receive(t, ch).(*messages.PluginDeregistered)
	require.Equal(t, "alloc-1", third.GetCurrent().GetAllocId())
	require.Less(t, first.GetSequence(), second.GetSequence())
	require.Less(t, second.GetSequence(), third.GetSequence())

	cancel()
	requireClosed(t, ch)
}

func TestChannelReplay(t *testing.T) {
	r, _ := newRegistry(t)
	require.NoError(t, r.RegisterPlugin(pluginNamed("a", 0)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub, err := r.Subscribe(ctx, csiNode, registry.SubscribeOptions{Replay: true})
	require.NoError(t, err)
	require.Equal(t, "a", receive(t, sub.C).GetPlugin().GetName())
	require.NoError(t, r.RegisterPlugin(pluginNamed("b", 1)))
	require.Equal(t, "b", receive(t, sub.C).GetPlugin().GetName())
}

func TestChannelClosesWhenTheRegistryShutsDown(t *testing.T) {
	system := probe.NewSystem(t)
	r, err := registry.New(system, registry.Config{Bucket: memoryBucket(t)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := r.PluginsUpdatedCh(ctx, csiNode)
	require.NoError(t, r.RegisterPlugin(plugin(0)))
	require.NoError(t, r.Shutdown())
	// The event sent before shutdown is still delivered, then the close.
	require.Equal(t, "alloc-0", receive(t, ch).GetPlugin().GetAllocId())
	requireClosed(t, ch)
}

func TestAReaderThatFallsBehindIsCutOffNotTheRegistry(t *testing.T) {
	r, system := newRegistry(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slow, err := r.Subscribe(ctx, csiNode, registry.SubscribeOptions{MaxBacklog: 10})
	require.NoError(t, err)
	healthy := probe.New(t, system)
	subscribe(t, r, healthy, csiNode, false)

	// Nobody reads slow.C: its backlog overflows, the registry goes on.
	for i := range 50 {
		require.NoError(t, r.RegisterPlugin(pluginNamed("p", i)))
	}
	for range 50 {
		probe.Expect[*messages.PluginRegistered](t, healthy, timeout)
	}
	requireClosed(t, slow.C)
	require.True(t, slow.Lagged(), "the subscription says why it ended")
}

func TestSubscribeRefusesABadType(t *testing.T) {
	r, _ := newRegistry(t)
	_, err := r.Subscribe(context.Background(), "../x", registry.SubscribeOptions{})
	require.ErrorIs(t, err, registry.ErrInvalid)
	ch := r.PluginsUpdatedCh(context.Background(), "../x")
	requireClosed(t, ch)
}

func TestEachRefusedSubscriptionIsAnErrorTheCallerSees(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ptype string
		// refuse brings the registry to refuse a subscription to ptype.
		refuse func(t *testing.T, r *registry.Registry)
		want   error
		says   string
	}{
		{"a bad type", "../x", func(*testing.T, *registry.Registry) {}, registry.ErrInvalid, "plugin type"},
		{"the limit on subscriptions reached", csiNode, func(t *testing.T, r *registry.Registry) {
			_, err := r.Subscribe(t.Context(), "", registry.SubscribeOptions{})
			require.NoError(t, err)
		}, registry.ErrLimit, "-max-subscribers"},
		{"a registry shut down", csiNode, func(t *testing.T, r *registry.Registry) {
			require.NoError(t, r.Shutdown())
		}, registry.ErrShutdown, "shut down"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs probe.LogBuffer
			system := probe.NewSystem(t)
			r, err := registry.New(system, registry.Config{
				Bucket: memoryBucket(t), Limits: registry.Limits{Subscribers: 1},
				Logger: hclog.New(&hclog.LoggerOptions{Output: &logs}),
			})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, r.Shutdown()) })
			tc.refuse(t, r)

			sub, err := r.Subscribe(t.Context(), tc.ptype, registry.SubscribeOptions{})
			require.ErrorIs(t, err, tc.want)
			require.ErrorContains(t, err, tc.says)
			require.Nil(t, sub)

			ch := r.PluginsUpdatedCh(t.Context(), tc.ptype)
			_, open := <-ch
			require.False(t, open, "PluginsUpdatedCh's refusal is a closed channel")
			require.Contains(t, logs.String(), "[WARN]  registry: PluginsUpdatedCh: subscription refused")
			require.Contains(t, logs.String(), tc.says, "the warning says why")
		})
	}
}

// registerMany registers n plugins of distinct names, one event each.
func registerMany(t *testing.T, r *registry.Registry, n int) {
	t.Helper()
	for i := range n {
		require.NoError(t, r.RegisterPlugin(pluginNamed(fmt.Sprint("p", i), i)))
	}
}

// requireInOrder reads n events and checks they are plugins p0… in order.
func requireInOrder(t *testing.T, ch <-chan registry.Event, n int) {
	t.Helper()
	var last uint64
	for i := range n {
		ev := receive(t, ch)
		require.Equal(t, fmt.Sprint("p", i), ev.GetPlugin().GetName())
		require.Greater(t, ev.GetSequence(), last)
		last = ev.GetSequence()
	}
}

func TestAReaderBehindByMoreThanTheChannelHoldsGetsEveryEventInOrder(t *testing.T) {
	r, _ := newRegistry(t)
	sub, err := r.Subscribe(t.Context(), csiNode, registry.SubscribeOptions{})
	require.NoError(t, err)
	registerMany(t, r, 500) // nobody reads meanwhile

	requireInOrder(t, sub.C, 500)
	require.NoError(t, r.RegisterPlugin(pluginNamed("later", 1)))
	require.Equal(t, "later", receive(t, sub.C).GetPlugin().GetName())
	require.NoError(t, sub.Err())
}

func TestShutdownDeliversWhatTheReaderHasNotReadThenCloses(t *testing.T) {
	system := probe.NewSystem(t)
	r, err := registry.New(system, registry.Config{Bucket: memoryBucket(t)})
	require.NoError(t, err)
	sub, err := r.Subscribe(t.Context(), csiNode, registry.SubscribeOptions{})
	require.NoError(t, err)
	registerMany(t, r, 500)
	require.NoError(t, r.Shutdown())

	requireInOrder(t, sub.C, 500)
	requireClosed(t, sub.C)
	require.ErrorIs(t, sub.Err(), registry.ErrShutdown)
}

func TestACancelledSubscriptionEndsAndTheRegistryForgetsIt(t *testing.T) {
	for _, behind := range []int{0, 500} {
		t.Run(fmt.Sprintf("%d events unread", behind), func(t *testing.T) {
			r, gauge := gaugedRegistry(t)
			ctx, cancel := context.WithCancel(t.Context())
			sub, err := r.Subscribe(ctx, csiNode, registry.SubscribeOptions{})
			require.NoError(t, err)
			require.Equal(t, int64(1), gauge.count.Load())
			registerMany(t, r, behind)

			cancel()
			requireClosed(t, sub.C)
			require.ErrorIs(t, sub.Err(), context.Canceled)
			require.Eventually(t, func() bool { return gauge.count.Load() == 0 }, timeout, time.Millisecond,
				"the registry forgets the subscription")
		})
	}
}

func TestAChannelSubscriptionOutlivesARestartAfterAPanic(t *testing.T) {
	system := probe.NewSystem(t)
	r, err := registry.New(system, registry.Config{Bucket: memoryBucket(t), Metrics: &panickyMetrics{},
		RequestTimeout: 300 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Shutdown()) })
	sub, err := r.Subscribe(t.Context(), csiNode, registry.SubscribeOptions{})
	require.NoError(t, err)

	require.Error(t, r.RegisterPlugin(plugin(0)), "the actor panics answering it")
	require.Equal(t, "alloc-0", receive(t, sub.C).GetPlugin().GetAllocId())
	require.NoError(t, r.RegisterPlugin(plugin(1)))
	require.Equal(t, "alloc-1", receive(t, sub.C).GetPlugin().GetAllocId())
}

func TestASubscriptionWhoseContextHasEndedClosesAtOnceAndIsNotKept(t *testing.T) {
	r, gauge := gaugedRegistry(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()

	sub, err := r.Subscribe(ctx, csiNode, registry.SubscribeOptions{})
	require.NoError(t, err)
	requireClosed(t, sub.C)
	require.ErrorIs(t, sub.Err(), context.Canceled)
	kept, err := r.Subscribe(t.Context(), csiNode, registry.SubscribeOptions{})
	require.NoError(t, err)
	require.NoError(t, r.RegisterPlugin(plugin(0)))
	receive(t, kept.C)
	require.Equal(t, int64(1), gauge.count.Load(), "only the live subscription is counted")
}

// gaugedRegistry is a registry whose metrics keep the subscriber count.
func gaugedRegistry(t *testing.T) (*registry.Registry, *subscriberGauge) {
	t.Helper()
	system := probe.NewSystem(t)
	gauge := &subscriberGauge{set: make(chan int64, 1024)}
	r, err := registry.New(system, registry.Config{Bucket: memoryBucket(t), Metrics: gauge})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Shutdown()) })
	return r, gauge
}
