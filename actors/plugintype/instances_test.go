package plugintype_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/plugvisor/plugvisor/actors/plugintype"
	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/supervisor"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 5 * time.Second

// What the test type tells the test probe.
type (
	started struct {
		alloc string
		pid   *actor.PID
	}
	stopped struct{ alloc, why string }
	failed  struct {
		alloc, reason string
		restarts      uint32 // Instances.Restarts of the instance
		serving       bool   // whether Instances.Serving names an allocation for the plugin
	}
	gone struct{ alloc string }
	// boom makes an instance panic.
	boom struct{}
	// closeNow makes the manager close its Instances.
	closeNow struct{}
	// countNow asks the manager for its Instances' Len, answered as an int.
	countNow struct{}
	// restartsOf asks the manager for its Instances' Restarts of pid.
	restartsOf struct{ pid *actor.PID }
)

// snapshot is a registry snapshot the test sets.
type snapshot struct {
	plugins []*messages.PluginInfo
	seq     uint64
}

func (s *snapshot) List(ptype string) []*messages.PluginInfo {
	var out []*messages.PluginInfo
	for _, p := range s.plugins {
		if p.GetType() == ptype {
			out = append(out, p)
		}
	}
	return out
}

func (s *snapshot) Sequence() uint64 { return s.seq }

// manager is the smallest plugin type: instances that say they started
// and panic on boom; every hook is reported to the test probe.
type manager struct {
	instances *plugintype.Instances
	report    *actor.PID
}

func (m *manager) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *closeNow:
		m.instances.Close(ctx)
	case *countNow:
		ctx.Respond(m.instances.Len())
	case *restartsOf:
		ctx.Respond(m.instances.Restarts(msg.pid))
	default:
		m.instances.Receive(ctx)
	}
}

func (m *manager) InstanceProps(_ actor.Context, p *messages.PluginInfo) (*actor.Props, error) {
	report := m.report
	return actor.PropsFromFunc(func(c actor.Context) {
		switch c.Message().(type) {
		case *actor.Started:
			c.Send(report, &started{alloc: p.GetAllocId(), pid: c.Self()})
		case *boom:
			panic("boom")
		}
	}, actor.WithReceiverMiddleware(probe.HoldMiddleware)), nil
}

func (m *manager) InstanceStopped(ctx actor.Context, p *messages.PluginInfo, _ *actor.PID, why string) {
	ctx.Send(m.report, &stopped{alloc: p.GetAllocId(), why: why})
}

func (m *manager) InstanceFailed(ctx actor.Context, p *messages.PluginInfo, instance *actor.PID, reason string) {
	ctx.Send(m.report, &failed{alloc: p.GetAllocId(), reason: reason, restarts: m.instances.Restarts(instance),
		serving: m.instances.Serving(p.GetType(), p.GetName()) != nil})
}

func (m *manager) InstanceGone(ctx actor.Context, p *messages.PluginInfo, _ *actor.PID) {
	ctx.Send(m.report, &gone{alloc: p.GetAllocId()})
}

// counted is the test's plugintype.Metrics.
type counted struct{ restarts, giveUps atomic.Int32 }

func (c *counted) InstanceRestarting(*messages.PluginInfo) { c.restarts.Add(1) }
func (c *counted) InstanceGaveUp(*messages.PluginInfo)     { c.giveUps.Add(1) }

type env struct {
	counted  counted
	system   *actor.ActorSystem
	registry *probe.Probe // plays the registry
	report   *probe.Probe // hears the hooks
	manager  *actor.PID
	snap     atomic.Pointer[snapshot]
}

func plugin(name, alloc string) *messages.PluginInfo {
	return &messages.PluginInfo{Type: "test", Name: name, AllocId: alloc}
}

// start runs a manager whose instances may fail once, and answers its
// subscription with a replay of current at sequence 1.
func start(t *testing.T, resync time.Duration, current ...*messages.PluginInfo) *env {
	t.Helper()
	system := probe.NewSystem(t)
	e := &env{system: system, registry: probe.New(t, system), report: probe.New(t, system)}
	e.snap.Store(&snapshot{plugins: current, seq: 1})
	cfg := plugintype.Config{Types: []string{"test"}, Registry: e.registry.PID(), ResyncInterval: resync,
		Snapshot: func() plugintype.Snapshot { return e.snap.Load() }, Metrics: &e.counted}
	require.NoError(t, cfg.Validate())
	strategy, err := supervisor.NewStrategy(supervisor.Spec{MaxRestarts: 1, Within: time.Minute, InitialDelay: time.Millisecond})
	require.NoError(t, err)
	e.manager = system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		m := &manager{report: e.report.PID()}
		m.instances = plugintype.New(cfg, m)
		return m
	}, actor.WithSupervisor(strategy), actor.WithReceiverMiddleware(probe.HoldMiddleware)))
	t.Cleanup(func() { _ = system.Root.StopFuture(e.manager).Wait() })
	sub := probe.Expect[*messages.Subscribe](t, e.registry, wait)
	require.Equal(t, "test", sub.GetType())
	require.True(t, sub.GetReplay())
	e.registry.Send(e.manager, &messages.Subscribed{Type: "test", Current: current, Sequence: 1})
	return e
}

// replaced returns the next instance started, and checks that the
// instance of goneAlloc terminated too; the two come from different
// actors, so in either order.
func (e *env) replaced(t *testing.T, goneAlloc string) *started {
	t.Helper()
	got := e.report.ExpectAll(t, wait, probe.Match[*started](nil),
		probe.Match(func(g *gone) bool { return g.alloc == goneAlloc }))
	return got[0].(*started)
}

func TestInstancesFollowTheRegistry(t *testing.T) {
	e := start(t, time.Hour, plugin("p", "a1"))
	first := probe.Expect[*started](t, e.report, wait)
	require.Equal(t, "a1", first.alloc)

	e.registry.Send(e.manager, &messages.PluginRegistered{Plugin: plugin("p", "a2"), Previous: plugin("p", "a1"), Sequence: 2})
	e.report.ExpectMessages(t, wait, &stopped{alloc: "a1", why: "registered"})
	second := e.replaced(t, "a1")
	require.Equal(t, "a2", second.alloc)
	require.NotEqual(t, first.pid.GetId(), second.pid.GetId(), "the replacement has a name of its own")

	e.registry.Send(e.manager, &messages.PluginRegistered{Plugin: plugin("p", "a2"), Sequence: 2})
	e.report.ExpectNone(t, 50*time.Millisecond) // an event already applied changes nothing

	e.registry.Send(e.manager, &messages.PluginDeregistered{Plugin: plugin("p", "a2"), Current: plugin("p", "a1"), CurrentChanged: true, Sequence: 3})
	e.report.ExpectMessages(t, wait, &stopped{alloc: "a2", why: "current allocation deregistered"})
	require.Equal(t, "a1", e.replaced(t, "a2").alloc)

	e.registry.Send(e.manager, &messages.PluginDeregistered{Plugin: plugin("p", "a1"), Gone: true, CurrentChanged: true, Sequence: 4})
	e.report.ExpectMessages(t, wait, &stopped{alloc: "a1", why: "deregistered"}, &gone{alloc: "a1"})
}

func TestResyncCorrectsInstancesOutOfStep(t *testing.T) {
	e := start(t, 20*time.Millisecond, plugin("extra", "a1"))
	require.Equal(t, "a1", probe.Expect[*started](t, e.report, wait).alloc)
	e.snap.Store(&snapshot{plugins: []*messages.PluginInfo{plugin("missing", "b1")}, seq: 5})
	e.report.ExpectMessages(t, wait, &stopped{alloc: "a1", why: "resync"})
	require.Equal(t, "b1", e.replaced(t, "a1").alloc)
	e.report.ExpectNone(t, 100*time.Millisecond) // later resyncs find nothing to correct
}

func TestAnInstanceThatGivesUpIsFailedUntilTheRegistrySaysSomethingNew(t *testing.T) {
	e := start(t, 20*time.Millisecond, plugin("p", "a1"))
	first := probe.Expect[*started](t, e.report, wait)
	e.report.Send(first.pid, &boom{})
	require.Equal(t, first.pid.GetId(), probe.Expect[*started](t, e.report, wait).pid.GetId(), "restarted in place")
	e.report.Send(first.pid, &boom{})
	got := probe.Expect[*failed](t, e.report, wait)
	require.Equal(t, "a1", got.alloc)
	require.Contains(t, got.reason, "boom (gave up after 1 restarts)")
	require.False(t, got.serving, "a failed plugin is served by no allocation, though its instance has not terminated yet")
	require.Equal(t, int32(1), e.counted.restarts.Load(), "the restart is counted")
	require.Equal(t, int32(1), e.counted.giveUps.Load(), "the give-up is counted")
	e.report.ExpectMessages(t, wait, &gone{alloc: "a1"})
	e.report.ExpectNone(t, 100*time.Millisecond) // resyncs leave a failed plugin alone

	e.registry.Send(e.manager, &messages.PluginRegistered{Plugin: plugin("p", "a2"), Sequence: 2})
	e.report.ExpectMessages(t, wait, &stopped{alloc: "a1", why: "registered"})
	require.Equal(t, "a2", probe.Expect[*started](t, e.report, wait).alloc)
}

// The restarts of an instance are counted once, here, for every manager
// that embeds Instances: its InstanceFailed hook reads how many times the
// supervision restarted the instance before it gave up, and the Metrics
// hear of each restart.
func TestAnInstanceThatGaveUpSaysHowOftenItWasRestarted(t *testing.T) {
	e := start(t, time.Hour, plugin("p", "a1"))
	first := probe.Expect[*started](t, e.report, wait)
	e.report.Send(first.pid, &boom{})
	probe.Expect[*started](t, e.report, wait)
	e.report.Send(first.pid, &boom{})
	got := probe.Expect[*failed](t, e.report, wait)
	require.Equal(t, uint32(1), got.restarts, "restarted once before it gave up")
	require.Equal(t, int32(1), e.counted.restarts.Load(), "the restart is counted once")
	e.report.ExpectMessages(t, wait, &gone{alloc: "a1"})
	require.Zero(t, probe.Ask[uint32](t, e.report, e.manager, &restartsOf{first.pid}, wait), "an instance that is gone has no count")
}

func TestClosingStopsEveryInstanceForGoodAndIsNoCorrection(t *testing.T) {
	e := start(t, 20*time.Millisecond, plugin("p", "a1"), plugin("q", "b1"))
	for range 2 {
		probe.Expect[*started](t, e.report, wait)
	}
	require.Equal(t, 2, probe.Ask[int](t, e.report, e.manager, &countNow{}, wait))
	e.report.Send(e.manager, &closeNow{})
	var stops, gones []any
	for len(stops)+len(gones) < 4 {
		switch m := e.report.Next(t, wait).Message.(type) {
		case *stopped:
			stops = append(stops, *m)
		case *gone:
			gones = append(gones, *m)
		default:
			t.Fatalf("expected instances stopped and gone, got %T %+v", m, m)
		}
	}
	require.ElementsMatch(t, []any{stopped{alloc: "a1", why: "shutting down"}, stopped{alloc: "b1", why: "shutting down"}}, stops)
	require.ElementsMatch(t, []any{gone{alloc: "a1"}, gone{alloc: "b1"}}, gones)
	require.Zero(t, probe.Ask[int](t, e.report, e.manager, &countNow{}, wait), "no instance is left once both are gone")

	// Neither the registry's news nor a resync against a snapshot that
	// still lists both plugins starts anything again.
	e.snap.Store(&snapshot{plugins: []*messages.PluginInfo{plugin("p", "a1"), plugin("q", "b1")}, seq: 9})
	e.registry.Send(e.manager, &messages.PluginRegistered{Plugin: plugin("r", "c1"), Sequence: 10})
	e.registry.Send(e.manager, &plugintype.Resync{})
	e.report.ExpectNone(t, 100*time.Millisecond)
}

// A registry event that reaches a manager while it stops (queued behind a
// bare stop, with no Close) starts no instance: one started then would be
// a child nobody stops, and the manager would never finish stopping. Nor
// is an instance that stops with its manager reported failed. The q
// instance is held so that the manager waits for it, handling the event
// and the end of the p instance meanwhile.
func TestRegistryNewsWhileStoppingStartsNothing(t *testing.T) {
	e := start(t, time.Hour, plugin("p", "a1"), plugin("q", "b1"))
	instances := map[string]*actor.PID{}
	for range 2 {
		s := probe.Expect[*started](t, e.report, wait)
		instances[s.alloc] = s.pid
	}
	releaseInstance := probe.Hold(t, e.system, instances["b1"], wait)
	releaseManager := probe.Hold(t, e.system, e.manager, wait)
	e.registry.Send(e.manager, &messages.PluginRegistered{Plugin: plugin("r", "c1"), Sequence: 2})
	e.registry.Send(e.manager, &messages.PluginRegistered{Plugin: plugin("p", "a2"), Previous: plugin("p", "a1"), Sequence: 3})
	e.registry.Send(e.manager, &plugintype.Resync{})
	stopped := e.system.Root.StopFuture(e.manager) // system messages go first: the news is handled while it stops
	releaseManager()

	e.report.ExpectMessages(t, wait, &gone{alloc: "a1"}) // nothing started, nothing failed
	releaseInstance()
	require.NoError(t, stopped.Wait())
	e.report.ExpectNone(t, 100*time.Millisecond)
}

func TestConfigNeedsItsRequiredFields(t *testing.T) {
	require.ErrorContains(t, plugintype.Config{}.Validate(), "required")
	require.ErrorIs(t, plugintype.Config{}.Validate(), errclass.Invalid)
	require.ErrorContains(t, plugintype.Config{Types: []string{"t"}, Registry: &actor.PID{},
		Snapshot: func() plugintype.Snapshot { return nil }, ResyncInterval: -1}.Validate(), "negative")
}

// TestAnEventOfOneTypeIsNotStaleBecauseAnotherTypesReplayIsNewer runs a
// manager of two types. Each type has its own subscription, so the
// registry's answers can arrive in any order across types: here the
// "node" replay at sequence 2 arrives before the "ctrl" replay taken at
// sequence 0 and the "ctrl" registration at sequence 1. The registration
// still starts its instance at once, not at the next resync.
func TestAnEventOfOneTypeIsNotStaleBecauseAnotherTypesReplayIsNewer(t *testing.T) {
	system := probe.NewSystem(t)
	registry, report := probe.New(t, system), probe.New(t, system)
	cfg := plugintype.Config{Types: []string{"ctrl", "node"}, Registry: registry.PID(), ResyncInterval: time.Hour,
		Snapshot: func() plugintype.Snapshot { return &snapshot{} }}
	pid := system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		m := &manager{report: report.PID()}
		m.instances = plugintype.New(cfg, m)
		return m
	}))
	t.Cleanup(func() { _ = system.Root.StopFuture(pid).Wait() })
	probe.Expect[*messages.Subscribe](t, registry, wait)
	probe.Expect[*messages.Subscribe](t, registry, wait)
	node := &messages.PluginInfo{Type: "node", Name: "p", AllocId: "n1"}
	ctrl := &messages.PluginInfo{Type: "ctrl", Name: "p", AllocId: "c1"}

	registry.Send(pid, &messages.Subscribed{Type: "node", Current: []*messages.PluginInfo{node}, Sequence: 2})
	require.Equal(t, "n1", probe.Expect[*started](t, report, wait).alloc)
	registry.Send(pid, &messages.Subscribed{Type: "ctrl", Sequence: 0})
	registry.Send(pid, &messages.PluginRegistered{Plugin: ctrl, Sequence: 1})

	require.Equal(t, "c1", probe.Expect[*started](t, report, wait).alloc, "the ctrl registration started its instance")
}
