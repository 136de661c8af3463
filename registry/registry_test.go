package registry_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
)

const timeout = 5 * time.Second

func TestBroadcastReachesAllSubscribers(t *testing.T) {
	r, system := newRegistry(t)
	subs := []*probe.Probe{probe.New(t, system), probe.New(t, system), probe.New(t, system)}
	for _, p := range subs {
		subscribe(t, r, p, csiNode, false)
	}
	require.NoError(t, r.RegisterPlugin(plugin(0)))
	for _, p := range subs {
		got := probe.Expect[*messages.PluginRegistered](t, p, timeout)
		require.True(t, proto.Equal(plugin(0), got.GetPlugin()))
	}
}

func TestUnsubscribeWorks(t *testing.T) {
	r, system := newRegistry(t)
	p := probe.New(t, system)
	subscribe(t, r, p, csiNode, false)
	p.Send(r.PID(), &messages.Unsubscribe{Type: csiNode, Subscriber: p.PID()})
	probe.Expect[*messages.Unsubscribed](t, p, timeout)
	require.NoError(t, r.RegisterPlugin(plugin(0)))
	p.ExpectNone(t, 50*time.Millisecond)
}

func TestRegisterAndDeregisterEmitEvents(t *testing.T) {
	r, system := newRegistry(t)
	p := probe.New(t, system)
	subscribe(t, r, p, csiNode, false)

	require.NoError(t, r.RegisterPlugin(plugin(0)))
	registered := probe.Expect[*messages.PluginRegistered](t, p, timeout)
	require.Nil(t, registered.GetPrevious(), "nothing was current before")

	require.NoError(t, r.DeregisterPlugin(csiNode, "my-plugin", "alloc-0"))
	gone := probe.Expect[*messages.PluginDeregistered](t, p, timeout)
	require.True(t, proto.Equal(plugin(0), gone.GetPlugin()))
	require.True(t, gone.GetGone(), "the last allocation is gone, so is the plugin")
	require.True(t, gone.GetCurrentChanged())
	require.Nil(t, gone.GetCurrent())
	require.Greater(t, gone.GetSequence(), registered.GetSequence())
	require.Empty(t, r.ListPlugins(csiNode))
}

func TestDispense(t *testing.T) {
	r, _ := newRegistry(t)
	require.NoError(t, r.RegisterPlugin(plugin(0)))

	cases := []struct {
		name, ptype, pname string
		want               error
	}{
		{"unknown type has no dispenser", "csi-controller", "my-plugin", registry.ErrNoDispenser},
		{"unknown name is not found", csiNode, "other", registry.ErrNotFound},
		{"empty name is invalid", csiNode, "", registry.ErrInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.DispensePlugin(tc.ptype, tc.pname)
			require.ErrorIs(t, err, tc.want)
		})
	}
	require.Equal(t, "alloc-0", dispense(t, r).GetAllocId())
}

func TestEqualNamesUnderDifferentTypesAreIndependent(t *testing.T) {
	r, _ := newRegistry(t)
	node := plugin(0)
	controller := proto.Clone(plugin(1)).(*messages.PluginInfo)
	controller.Type = "csi-controller"
	require.NoError(t, r.RegisterPlugin(node))
	require.NoError(t, r.RegisterPlugin(controller))

	require.Len(t, r.ListPlugins(csiNode), 1)
	require.Len(t, r.ListPlugins("csi-controller"), 1)
	require.NoError(t, r.DeregisterPlugin("csi-controller", "my-plugin", "alloc-1"))
	require.Empty(t, r.ListPlugins("csi-controller"))
	require.Equal(t, "alloc-0", r.ListPlugins(csiNode)[0].GetAllocId())
}

func TestListPluginsIsSortedByName(t *testing.T) {
	r, _ := newRegistry(t)
	for i, name := range []string{"zeta", "alpha", "mu"} {
		require.NoError(t, r.RegisterPlugin(pluginNamed(name, i)))
	}
	var names []string
	for _, p := range r.ListPlugins(csiNode) {
		names = append(names, p.GetName())
	}
	require.Equal(t, []string{"alpha", "mu", "zeta"}, names)
}

func TestPluginForAlloc(t *testing.T) {
	r, _ := newRegistry(t)
	require.NoError(t, r.RegisterPlugin(plugin(0)))
	require.NoError(t, r.RegisterPlugin(plugin(1)))

	old, err := r.PluginForAlloc(csiNode, "my-plugin", "alloc-0")
	require.NoError(t, err)
	require.Equal(t, "v0", old.GetVersion(), "a non-current allocation is still found")
	_, err = r.PluginForAlloc(csiNode, "my-plugin", "alloc-9")
	require.ErrorIs(t, err, registry.ErrNotFound)
}

func TestDeregisterAnUnknownAllocChangesNothing(t *testing.T) {
	r, system := newRegistry(t)
	require.NoError(t, r.RegisterPlugin(plugin(0)))
	p := probe.New(t, system)
	subscribe(t, r, p, csiNode, false)
	before := r.Snapshot().Sequence()

	err := r.DeregisterPlugin(csiNode, "my-plugin", "alloc-unknown")
	require.ErrorIs(t, err, registry.ErrNotFound)
	require.Contains(t, err.Error(), `has no allocation "alloc-unknown"`)
	err = r.DeregisterPlugin("csi-controller", "my-plugin", "alloc-0")
	require.ErrorIs(t, err, registry.ErrNotFound)

	p.ExpectNone(t, 50*time.Millisecond)
	require.Equal(t, before, r.Snapshot().Sequence())
	require.Equal(t, "alloc-0", dispense(t, r).GetAllocId(), "the live plugin is untouched")
}

func TestDeregisterANonCurrentAllocLeavesTheCurrentOne(t *testing.T) {
	r, system := newRegistry(t)
	require.NoError(t, r.RegisterPlugin(plugin(0)))
	require.NoError(t, r.RegisterPlugin(plugin(1)))
	p := probe.New(t, system)
	subscribe(t, r, p, csiNode, false)

	require.NoError(t, r.DeregisterPlugin(csiNode, "my-plugin", "alloc-0"))
	ev := probe.Expect[*messages.PluginDeregistered](t, p, timeout)
	require.Equal(t, "alloc-0", ev.GetPlugin().GetAllocId())
	require.False(t, ev.GetCurrentChanged())
	require.False(t, ev.GetGone())
	require.Equal(t, "alloc-1", ev.GetCurrent().GetAllocId())
}

func TestDeregisterTheCurrentAllocPromotesTheNextNewest(t *testing.T) {
	r, system := newRegistry(t)
	for i := range 3 {
		require.NoError(t, r.RegisterPlugin(plugin(i)))
	}
	p := probe.New(t, system)
	subscribe(t, r, p, csiNode, false)

	require.NoError(t, r.DeregisterPlugin(csiNode, "my-plugin", "alloc-2"))
	ev := probe.Expect[*messages.PluginDeregistered](t, p, timeout)
	require.True(t, ev.GetCurrentChanged())
	require.Equal(t, "alloc-1", ev.GetCurrent().GetAllocId())
	require.Equal(t, "alloc-1", dispense(t, r).GetAllocId())
	require.Equal(t, []string{"alloc-1", "alloc-0"}, allocIDs(r.Snapshot().Allocations(csiNode, "my-plugin")))
}

func allocIDs(infos []*messages.PluginInfo) []string {
	return each(infos, (*messages.PluginInfo).GetAllocId)
}

// each returns field of every plugin in infos, in order.
func each(infos []*messages.PluginInfo, field func(*messages.PluginInfo) string) []string {
	out := make([]string, 0, len(infos))
	for _, p := range infos {
		out = append(out, field(p))
	}
	return out
}

func TestReRegistration(t *testing.T) {
	r, system := newRegistry(t)
	require.NoError(t, r.RegisterPlugin(plugin(0)))
	require.NoError(t, r.RegisterPlugin(plugin(1)))
	p := probe.New(t, system)
	subscribe(t, r, p, csiNode, false)

	t.Run("identical info emits nothing", func(t *testing.T) {
		require.NoError(t, r.RegisterPlugin(plugin(0)))
		p.ExpectNone(t, 50*time.Millisecond)
	})
	t.Run("changed info updates in place", func(t *testing.T) {
		moved := plugin(0)
		moved.Connection.SocketPath = "/var/data/alloc/alloc-0/moved.sock"
		require.NoError(t, r.RegisterPlugin(moved))
		ev := probe.Expect[*messages.PluginUpdated](t, p, timeout)
		require.Equal(t, "/var/data/alloc/alloc-0/moved.sock", ev.GetPlugin().GetConnection().GetSocketPath())
		require.Equal(t, "/var/data/alloc/alloc-0/csi.sock", ev.GetPrevious().GetConnection().GetSocketPath())
		require.False(t, ev.GetIsCurrent(), "alloc-0 is older than alloc-1")
		got, err := r.PluginForAlloc(csiNode, "my-plugin", "alloc-0")
		require.NoError(t, err)
		require.Equal(t, "/var/data/alloc/alloc-0/moved.sock", got.GetConnection().GetSocketPath())
		require.Equal(t, "alloc-1", dispense(t, r).GetAllocId(), "an update does not make an old alloc current")
	})
	t.Run("changed info of the current alloc says so", func(t *testing.T) {
		bumped := plugin(1)
		bumped.Version = "v1.1"
		require.NoError(t, r.RegisterPlugin(bumped))
		ev := probe.Expect[*messages.PluginUpdated](t, p, timeout)
		require.True(t, ev.GetIsCurrent())
		require.Equal(t, "v1.1", dispense(t, r).GetVersion())
	})
}

func TestCallerMutatingItsInfoChangesNothing(t *testing.T) {
	r, _ := newRegistry(t)
	info := plugin(0)
	require.NoError(t, r.RegisterPlugin(info))
	info.Connection.SocketPath = "/elsewhere.sock"
	require.Equal(t, "/var/data/alloc/alloc-0/csi.sock", dispense(t, r).GetConnection().GetSocketPath())
}

func TestRegisterAfterShutdownFailsPromptly(t *testing.T) {
	system := probe.NewSystem(t)
	r, err := registry.New(system, registry.Config{Bucket: memoryBucket(t), Logger: probe.Logger(t)})
	require.NoError(t, err)
	require.NoError(t, r.RegisterPlugin(plugin(0)))
	require.NoError(t, r.Shutdown())
	require.NoError(t, r.Shutdown(), "a second shutdown is harmless")

	require.ErrorIs(t, r.RegisterPlugin(plugin(1)), registry.ErrShutdown)
	require.ErrorIs(t, r.DeregisterPlugin(csiNode, "my-plugin", "alloc-0"), registry.ErrShutdown)
	_, err = r.Subscribe(context.Background(), csiNode, registry.SubscribeOptions{})
	require.ErrorIs(t, err, registry.ErrShutdown)
	require.Len(t, r.ListPlugins(csiNode), 1, "reads answer from the last snapshot")
	_, err = r.WaitForPlugin(context.Background(), csiNode, "never")
	require.ErrorIs(t, err, registry.ErrShutdown)
}

func TestActorCallersAfterShutdownGetAnAnswer(t *testing.T) {
	system := probe.NewSystem(t)
	r, err := registry.New(system, registry.Config{Bucket: memoryBucket(t)})
	require.NoError(t, err)
	p := probe.New(t, system)
	require.NoError(t, r.Shutdown())
	// The actor is gone: protoactor answers a request to a dead PID with a
	// DeadLetterResponse rather than silence.
	p.Send(r.PID(), &messages.RegisterPlugin{Plugin: plugin(0)})
	probe.Expect[*actor.DeadLetterResponse](t, p, timeout)
}

func TestWritesRacingShutdownAreAnsweredOrRefused(t *testing.T) {
	system := probe.NewSystem(t)
	r, err := registry.New(system, registry.Config{Bucket: memoryBucket(t)})
	require.NoError(t, err)
	var wg sync.WaitGroup
	results := make(chan error, 400)
	for w := range 4 {
		wg.Go(func() {
			for i := range 100 {
				results <- r.RegisterPlugin(pluginNamed("race", w*100+i))
			}
		})
	}
	require.NoError(t, r.Shutdown())
	wg.Wait()
	close(results)
	ok := 0
	for err := range results {
		if err != nil {
			require.ErrorIs(t, err, registry.ErrShutdown)
			continue
		}
		ok++
	}
	require.Len(t, r.Snapshot().Allocations(csiNode, "race"), ok, "every acknowledged write is in the final state")
}

func TestWaitForPlugin(t *testing.T) {
	r, _ := newRegistry(t)
	t.Run("never", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		defer cancel()
		_, err := r.WaitForPlugin(ctx, csiNode, "my-plugin")
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
	t.Run("after a delay", func(t *testing.T) {
		got := make(chan *messages.PluginInfo, 1)
		go func() {
			p, err := r.WaitForPlugin(context.Background(), csiNode, "my-plugin")
			if err == nil {
				got <- p
			}
			close(got)
		}()
		require.NoError(t, r.RegisterPlugin(pluginNamed("other", 7)))
		require.NoError(t, r.RegisterPlugin(plugin(3)))
		select {
		case p := <-got:
			require.Equal(t, "alloc-3", p.GetAllocId())
		case <-time.After(timeout):
			t.Fatal("WaitForPlugin did not return after the plugin registered")
		}
	})
}

func TestBadInputIsRefusedAndChangesNothing(t *testing.T) {
	r, system := newRegistry(t)
	require.NoError(t, r.RegisterPlugin(plugin(0)))
	p := probe.New(t, system)
	subscribe(t, r, p, "", false)
	before := r.Snapshot()

	with := func(change func(*messages.PluginInfo)) *messages.PluginInfo {
		info := plugin(5)
		change(info)
		return info
	}
	long := strings.Repeat("x", registry.MaxIDLen+1)
	cases := []struct {
		name string
		info *messages.PluginInfo
		want string
	}{
		{"nil info", nil, "plugin info must not be empty"},
		{"empty type", with(func(i *messages.PluginInfo) { i.Type = "" }), "plugin type must not be empty"},
		{"empty name", with(func(i *messages.PluginInfo) { i.Name = "" }), "plugin name must not be empty"},
		{"empty alloc ID", with(func(i *messages.PluginInfo) { i.AllocId = "" }), "alloc ID must not be empty"},
		{"oversized name", with(func(i *messages.PluginInfo) { i.Name = long }), "over the limit of 128"},
		{"slash in name", with(func(i *messages.PluginInfo) { i.Name = "a/b" }), "path separator"},
		{"backslash in alloc ID", with(func(i *messages.PluginInfo) { i.AllocId = `a\b` }), "path separator"},
		{"dot-dot in alloc ID", with(func(i *messages.PluginInfo) { i.AllocId = "..evil" }), `".."`},
		{"NUL in type", with(func(i *messages.PluginInfo) { i.Type = "csi\x00node" }), "must not contain NUL"},
		{"no connection", with(func(i *messages.PluginInfo) { i.Connection = nil }), "socket path or an address"},
		{"both socket and address", with(func(i *messages.PluginInfo) { i.Connection.Address = "tcp://127.0.0.1:1" }), "not both"},
		{"relative socket path", with(func(i *messages.PluginInfo) { i.Connection.SocketPath = "run/csi.sock" }), "must be absolute"},
		{"socket path with dot-dot", with(func(i *messages.PluginInfo) { i.Connection.SocketPath = "/run/../etc/csi.sock" }), "must be clean"},
		{"socket path of 108 bytes", with(func(i *messages.PluginInfo) {
			i.Connection.SocketPath = "/" + strings.Repeat("s", 102) + ".sock"
		}), "over the unix limit of 107"},
		{"address without port", with(func(i *messages.PluginInfo) {
			i.Connection = &messages.ConnectionInfo{Address: "tcp://127.0.0.1"}
		}), "must be tcp://host:port"},
		{"address with bad scheme", with(func(i *messages.PluginInfo) {
			i.Connection = &messages.ConnectionInfo{Address: "ftp://127.0.0.1:21"}
		}), "scheme must be tcp"},
		{"oversized version", with(func(i *messages.PluginInfo) { i.Version = strings.Repeat("v", 300) }), "plugin version"},
		{"empty option key", with(func(i *messages.PluginInfo) { i.Options = map[string]string{"": "v"} }), "keys must be"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := r.RegisterPlugin(tc.info)
			require.ErrorIs(t, err, registry.ErrInvalid)
			require.Contains(t, err.Error(), tc.want)
			require.True(t, strings.HasPrefix(err.Error(), "invalid argument: "), err.Error())
		})
	}
	t.Run("socket path of exactly 107 bytes is fine", func(t *testing.T) {
		info := pluginNamed("edge", 1)
		info.Connection.SocketPath = "/" + strings.Repeat("s", 101) + ".sock"
		require.Len(t, info.Connection.SocketPath, 107)
		require.NoError(t, r.RegisterPlugin(info))
		require.NoError(t, r.DeregisterPlugin(csiNode, "edge", "alloc-1"))
		probe.Expect[*messages.PluginRegistered](t, p, timeout)
		probe.Expect[*messages.PluginDeregistered](t, p, timeout)
		before = r.Snapshot()
	})
	t.Run("bad deregistration", func(t *testing.T) {
		require.ErrorIs(t, r.DeregisterPlugin(csiNode, "../etc", "alloc-0"), registry.ErrInvalid)
		require.ErrorIs(t, r.DeregisterPlugin("", "my-plugin", "alloc-0"), registry.ErrInvalid)
		require.ErrorIs(t, r.DeregisterPlugin(csiNode, "my-plugin", ""), registry.ErrInvalid)
	})
	p.ExpectNone(t, 50*time.Millisecond)
	require.Same(t, before, r.Snapshot(), "no snapshot was published")
	require.Equal(t, "alloc-0", dispense(t, r).GetAllocId())
}

func TestErrorsSurviveTheActorBoundary(t *testing.T) {
	err := messages.ErrorFromProto(messages.ErrorToProto(fmt.Errorf("%w: disk full", registry.ErrStore)))
	require.ErrorIs(t, err, registry.ErrStore)
	require.EqualError(t, err, "durable store failed: disk full")
	require.NoError(t, messages.ErrorFromProto(nil))
	require.False(t, errors.Is(messages.ErrorFromProto(&messages.Error{Message: "x"}), registry.ErrStore))
}

// panickyMetrics panics in the registry actor the first time a register is
// answered: a stand-in for a bug in the actor.
type panickyMetrics struct{ fired atomic.Bool }

func (m *panickyMetrics) Write(op string, _ error, _ time.Duration) {
	if op == "register" && m.fired.CompareAndSwap(false, true) {
		panic("metrics bug")
	}
}
func (m *panickyMetrics) Batch(int)       {}
func (m *panickyMetrics) EventsSent(int)  {}
func (m *panickyMetrics) Subscribers(int) {}

func TestARestartAfterAPanicKeepsDurableStateAndSubscribers(t *testing.T) {
	var logs probe.LogBuffer
	system := probe.NewSystem(t)
	r, err := registry.New(system, registry.Config{Bucket: memoryBucket(t), Metrics: &panickyMetrics{},
		Dispensers: echoDispensers(), RequestTimeout: 300 * time.Millisecond,
		Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Error})})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Shutdown()) })
	p := probe.New(t, system)
	subscribe(t, r, p, csiNode, false)

	// The panic comes after alloc-0 is durable and published, while its
	// caller is being answered: the caller hears nothing.
	err = r.RegisterPlugin(plugin(0))
	require.ErrorIs(t, err, actor.ErrTimeout)
	require.ErrorIs(t, err, registry.ErrTimeout)
	require.ErrorIs(t, err, errclass.Deadline, "over HTTP a 504, not a 500")
	require.ErrorContains(t, err, "no answer from the registry actor after 300ms to 450ms", "the error says how long a write may wait")
	probe.Expect[*messages.PluginRegistered](t, p, timeout)

	require.NoError(t, r.RegisterPlugin(plugin(1)), "the restarted actor takes writes")
	ev := probe.Expect[*messages.PluginRegistered](t, p, timeout)
	require.Equal(t, "alloc-1", ev.GetPlugin().GetAllocId(), "the subscriber outlived the restart")
	require.Equal(t, "alloc-0", ev.GetPrevious().GetAllocId(), "the restart began from the durable state")
	require.Equal(t, []string{"alloc-1", "alloc-0"}, allocIDs(r.Snapshot().Allocations(csiNode, "my-plugin")))

	got := logs.String()
	require.Contains(t, got, "actor panicked")
	require.Contains(t, got, "metrics bug")
	require.Contains(t, got, "panickyMetrics).Write", "the stack names the function that panicked")
}
