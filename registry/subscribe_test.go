package registry_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
)

func TestEventsArriveInOrder(t *testing.T) {
	r, system := newRegistry(t)
	p := probe.New(t, system)
	subscribe(t, r, p, csiNode, false)

	const writers, each = 4, 25
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				require.NoError(t, r.RegisterPlugin(pluginNamed("p", w*each+i)))
			}
		})
	}
	wg.Wait()
	var last uint64
	for range writers * each {
		ev := probe.Expect[*messages.PluginRegistered](t, p, timeout)
		require.Greater(t, ev.GetSequence(), last, "sequence numbers only grow")
		last = ev.GetSequence()
	}
	p.ExpectNone(t, 20*time.Millisecond)
	require.Equal(t, last, r.Snapshot().Sequence())
}

func TestReplayGivesALateSubscriberTheCurrentState(t *testing.T) {
	r, system := newRegistry(t)
	require.NoError(t, r.RegisterPlugin(pluginNamed("b", 0)))
	require.NoError(t, r.RegisterPlugin(pluginNamed("a", 1)))
	require.NoError(t, r.RegisterPlugin(pluginNamed("a", 2)))
	p := probe.New(t, system)

	ack := subscribe(t, r, p, csiNode, true)
	require.Len(t, ack.GetCurrent(), 2)
	require.Equal(t, "a", ack.GetCurrent()[0].GetName())
	require.Equal(t, "alloc-2", ack.GetCurrent()[0].GetAllocId())
	require.Equal(t, r.Snapshot().Sequence(), ack.GetSequence())

	require.NoError(t, r.RegisterPlugin(pluginNamed("c", 3)))
	ev := probe.Expect[*messages.PluginRegistered](t, p, timeout)
	require.Greater(t, ev.GetSequence(), ack.GetSequence(), "no event already in the replay is repeated")
}

func TestSubscriptionsArePerType(t *testing.T) {
	r, system := newRegistry(t)
	nodes, controllers, all := probe.New(t, system), probe.New(t, system), probe.New(t, system)
	subscribe(t, r, nodes, csiNode, false)
	subscribe(t, r, controllers, "csi-controller", false)
	subscribe(t, r, all, "", false)
	subscribe(t, r, all, csiNode, false) // both: still one copy of each event

	require.NoError(t, r.RegisterPlugin(plugin(0)))
	probe.Expect[*messages.PluginRegistered](t, nodes, timeout)
	probe.Expect[*messages.PluginRegistered](t, all, timeout)
	controllers.ExpectNone(t, 50*time.Millisecond)
	all.ExpectNone(t, 10*time.Millisecond)
}

// subscriberGauge is a registry.Metrics that keeps the subscriber count.
type subscriberGauge struct {
	count atomic.Int64
	set   chan int64
}

func (g *subscriberGauge) Write(string, error, time.Duration) {}
func (g *subscriberGauge) Batch(int)                          {}
func (g *subscriberGauge) EventsSent(int)                     {}
func (g *subscriberGauge) Subscribers(n int) {
	g.count.Store(int64(n))
	g.set <- int64(n)
}

func TestDeadSubscribersAreDropped(t *testing.T) {
	system := probe.NewSystem(t)
	gauge := &subscriberGauge{set: make(chan int64, 16)}
	r, err := registry.New(system, registry.Config{Bucket: memoryBucket(t), Metrics: gauge})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Shutdown()) })
	doomed := probe.New(t, system)
	subscribe(t, r, doomed, csiNode, false)
	watcher := probe.New(t, system)
	subscribe(t, r, watcher, csiNode, false)
	require.Equal(t, int64(2), gauge.count.Load())
	for len(gauge.set) > 0 {
		<-gauge.set // the counts from subscribing
	}

	system.Root.Stop(doomed.PID())
	for dropped := false; !dropped; {
		select {
		case n := <-gauge.set:
			dropped = n == 1 // the registry saw the Terminated and dropped doomed
		case <-time.After(timeout):
			t.Fatal("the registry did not drop the dead subscriber")
		}
	}
	require.NoError(t, r.RegisterPlugin(plugin(0)))
	probe.Expect[*messages.PluginRegistered](t, watcher, timeout)
	require.Equal(t, int64(1), gauge.count.Load())
}

func TestAStuckSubscriberDelaysNobody(t *testing.T) {
	r, system := newRegistry(t)
	// blocker stops reading: its Receive blocks on the first event until
	// the test ends.
	release := make(chan struct{})
	blocker := system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if _, ok := ctx.Message().(*messages.PluginRegistered); ok {
			<-release
		}
	}))
	t.Cleanup(func() { close(release); system.Root.Stop(blocker) })
	system.Root.Send(r.PID(), &messages.Subscribe{Type: csiNode, Subscriber: blocker})

	healthy := probe.New(t, system)
	subscribe(t, r, healthy, csiNode, false)

	for i := range 200 {
		require.NoError(t, r.RegisterPlugin(pluginNamed("p", i)))
	}
	require.Len(t, r.ListPlugins(csiNode), 1)
	for range 200 {
		probe.Expect[*messages.PluginRegistered](t, healthy, timeout)
	}

	t.Run("cancelling it while stuck", func(t *testing.T) {
		healthy.Send(r.PID(), &messages.Unsubscribe{Type: csiNode, Subscriber: blocker})
		require.NoError(t, r.RegisterPlugin(pluginNamed("q", 1)))
		probe.Expect[*messages.PluginRegistered](t, healthy, timeout)
		require.NoError(t, r.DeregisterPlugin(csiNode, "q", "alloc-1"))
		probe.Expect[*messages.PluginDeregistered](t, healthy, timeout)
	})
}
