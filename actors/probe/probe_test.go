package probe_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/messages"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// failingT stands in for the test so a probe's failure can be observed:
// Fatalf records the message and ends the goroutine, as testing.T does.
type failingT struct {
	*testing.T
	failure string
}

func (f *failingT) Fatalf(format string, args ...any) {
	f.failure = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// runFailing runs check against a failingT in its own goroutine and returns
// the failure message it produced ("" when check passed).
func runFailing(t *testing.T, check func(probe.TB)) string {
	ft := &failingT{T: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(ft)
	}()
	<-done
	return ft.failure
}

func echo(ctx actor.Context) {
	if msg, ok := ctx.Message().(*messages.PluginInfo); ok {
		ctx.Respond(msg)
	}
}

func plugin(name string) *messages.PluginInfo {
	return &messages.PluginInfo{Type: "csi-node", Name: name, AllocId: "a1"}
}

func TestExpectReturnsTheTypedMessage(t *testing.T) {
	system := probe.NewSystem(t)
	p := probe.New(t, system)
	system.Root.Send(p.PID(), plugin("one"))
	got := probe.Expect[*messages.PluginInfo](t, p, time.Second)
	require.Equal(t, "one", got.GetName())
}

func TestExpectFailsWhenNothingArrives(t *testing.T) {
	system := probe.NewSystem(t)
	p := probe.New(t, system)
	failure := runFailing(t, func(tb probe.TB) {
		probe.Expect[*messages.PluginInfo](tb, p, 20*time.Millisecond)
	})
	require.Contains(t, failure, "expected *messages.PluginInfo within 20ms, but no message arrived")
}

func TestExpectFailsNamingWhatArrivedInstead(t *testing.T) {
	system := probe.NewSystem(t)
	p := probe.New(t, system)
	system.Root.Send(p.PID(), &messages.Unsubscribed{Type: "csi-node"})
	failure := runFailing(t, func(tb probe.TB) {
		probe.Expect[*messages.PluginInfo](tb, p, time.Second)
	})
	require.Contains(t, failure, "expected *messages.PluginInfo, got *messages.Unsubscribed")
	require.Contains(t, failure, "csi-node")
}

func TestNextFailsWhenNothingArrives(t *testing.T) {
	system := probe.NewSystem(t)
	p := probe.New(t, system)
	failure := runFailing(t, func(tb probe.TB) { p.Next(tb, 10*time.Millisecond) })
	require.Contains(t, failure, "no message arrived within 10ms")
}

func TestExpectNone(t *testing.T) {
	system := probe.NewSystem(t)
	p := probe.New(t, system)

	require.Empty(t, runFailing(t, func(tb probe.TB) { p.ExpectNone(tb, 20*time.Millisecond) }),
		"a quiet probe passes ExpectNone")

	system.Root.Send(p.PID(), plugin("late"))
	failure := runFailing(t, func(tb probe.TB) { p.ExpectNone(tb, time.Second) })
	require.Contains(t, failure, "expected no message for 1s, got *messages.PluginInfo")
}

func TestExpectMessagesChecksOrder(t *testing.T) {
	system := probe.NewSystem(t)
	p := probe.New(t, system)
	for _, name := range []string{"a", "b", "c"} {
		system.Root.Send(p.PID(), plugin(name))
	}
	p.ExpectMessages(t, time.Second, plugin("a"), plugin("b"), plugin("c"))

	system.Root.Send(p.PID(), plugin("b"))
	system.Root.Send(p.PID(), plugin("a"))
	failure := runFailing(t, func(tb probe.TB) {
		p.ExpectMessages(tb, time.Second, plugin("a"), plugin("b"))
	})
	require.Contains(t, failure, "message 1 of 2")
	require.Contains(t, failure, `name:"b"`)
}

func TestExpectMessagesFailsWhenOneIsMissing(t *testing.T) {
	system := probe.NewSystem(t)
	p := probe.New(t, system)
	system.Root.Send(p.PID(), plugin("a"))
	failure := runFailing(t, func(tb probe.TB) {
		p.ExpectMessages(tb, 20*time.Millisecond, plugin("a"), plugin("b"))
	})
	require.Contains(t, failure, "message 2 of 2")
	require.Contains(t, failure, "no message arrived")
}

func TestFishForSkipsUntilAMatch(t *testing.T) {
	system := probe.NewSystem(t)
	p := probe.New(t, system)
	system.Root.Send(p.PID(), &messages.Unsubscribed{})
	system.Root.Send(p.PID(), plugin("a"))
	system.Root.Send(p.PID(), plugin("b"))
	got := probe.FishFor(t, p, time.Second, func(m *messages.PluginInfo) bool { return m.GetName() == "b" })
	require.Equal(t, "b", got.GetName())

	failure := runFailing(t, func(tb probe.TB) {
		system.Root.Send(p.PID(), plugin("c"))
		probe.FishFor(tb, p, 30*time.Millisecond, func(m *messages.PluginInfo) bool { return m.GetName() == "z" })
	})
	require.Contains(t, failure, "no matching *messages.PluginInfo")
	require.Contains(t, failure, "skipped 1")
}

func TestAskGetsTheReply(t *testing.T) {
	system := probe.NewSystem(t)
	p := probe.New(t, system)
	target := system.Root.Spawn(actor.PropsFromFunc(echo))
	t.Cleanup(func() { system.Root.Stop(target) })

	got := probe.Ask[*messages.PluginInfo](t, p, target, plugin("ping"), time.Second)
	require.Equal(t, "ping", got.GetName())
}

func TestProbeAnswersARequest(t *testing.T) {
	system := probe.NewSystem(t)
	p := probe.New(t, system)
	results := probe.New(t, system)
	// asker asks the probe for a PluginInfo and forwards the answer to results.
	asker := system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch msg := ctx.Message().(type) {
		case *actor.Started:
			ctx.Request(p.PID(), &messages.Subscribe{Type: "csi-node"})
		case *messages.PluginInfo:
			ctx.Send(results.PID(), msg)
		}
	}))
	t.Cleanup(func() { system.Root.Stop(asker) })

	req := probe.ExpectFrom[*messages.Subscribe](t, p, time.Second)
	require.True(t, req.Sender.Equal(asker))
	req.Respond(plugin("answer"))
	results.ExpectMessages(t, time.Second, plugin("answer"))
}

func TestWatchAndExpectTerminated(t *testing.T) {
	system := probe.NewSystem(t)
	p := probe.New(t, system)
	target := system.Root.Spawn(actor.PropsFromFunc(echo))
	p.Watch(t, target)
	system.Root.Stop(target)
	p.ExpectTerminated(t, target, time.Second)
}

func TestExpectTerminatedFailsForAnotherActor(t *testing.T) {
	system := probe.NewSystem(t)
	p := probe.New(t, system)
	first := system.Root.Spawn(actor.PropsFromFunc(echo))
	second := system.Root.Spawn(actor.PropsFromFunc(echo))
	t.Cleanup(func() { system.Root.Stop(second) })
	p.Watch(t, first)
	system.Root.Stop(first)
	failure := runFailing(t, func(tb probe.TB) { p.ExpectTerminated(tb, second, time.Second) })
	require.Contains(t, failure, "expected Terminated of "+second.String())
}

func TestWatchingAGoneActorYieldsTerminated(t *testing.T) {
	system := probe.NewSystem(t)
	p := probe.New(t, system)
	target := system.Root.Spawn(actor.PropsFromFunc(echo))
	require.NoError(t, system.Root.StopFuture(target).Wait())
	p.Watch(t, target)
	p.ExpectTerminated(t, target, time.Second)
}

func TestHoldKeepsAnActorUntilReleased(t *testing.T) {
	system := probe.NewSystem(t)
	p := probe.New(t, system)
	target := system.Root.Spawn(actor.PropsFromFunc(echo, actor.WithReceiverMiddleware(probe.HoldMiddleware)))
	release := probe.Hold(t, system, target, time.Second)
	p.Send(target, plugin("queued"))
	p.ExpectNone(t, 50*time.Millisecond) // held: the message waits behind the hold
	release()
	require.Equal(t, "queued", probe.Expect[*messages.PluginInfo](t, p, time.Second).GetName())
}

func TestHoldFailsWhenTheActorCannotBeHeld(t *testing.T) {
	system := probe.NewSystem(t)
	target := system.Root.Spawn(actor.PropsFromFunc(echo)) // no HoldMiddleware
	failure := runFailing(t, func(tb probe.TB) { probe.Hold(tb, system, target, 50*time.Millisecond) })
	require.Contains(t, failure, "did not take the hold within 50ms")
}
