package bench_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/registry/workload"
)

// The ceiling: what protoactor itself does on this machine, in this run.
// plugvisor's registry cannot deliver events faster than an actor receives
// messages, nor answer a facade call faster than a request/response round
// trip.

// tick is the message the raw benchmarks send: one shared pointer, so the
// figure is protoactor's delivery and not an allocation of ours.
type tick struct{}

var theTick = &tick{}

// BenchmarkProtoactorSend: one goroutine sends b.N messages to an actor
// that counts them, without waiting (pipelined); the time runs until the
// actor has counted the last one.
func BenchmarkProtoactorSend(b *testing.B) {
	system := probe.NewSystem(b)
	done := make(chan struct{})
	want := b.N
	count := 0
	pid := system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if _, ok := ctx.Message().(*tick); ok {
			if count++; count == want {
				close(done)
			}
		}
	}))
	b.Cleanup(func() { _ = system.Root.StopFuture(pid).Wait() })
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		system.Root.Send(pid, theTick)
	}
	<-done
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}

// startEcho starts an actor that answers every tick with a tick, in an
// actor system of its own, stopped with the benchmark.
func startEcho(b *testing.B) (*actor.ActorSystem, *actor.PID) {
	system := probe.NewSystem(b)
	pid := system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if _, ok := ctx.Message().(*tick); ok {
			ctx.Respond(theTick)
		}
	}))
	b.Cleanup(func() { _ = system.Root.StopFuture(pid).Wait() })
	return system, pid
}

// BenchmarkProtoactorRequestFuture: one goroutine asks an echo actor and
// waits for each answer (RequestFuture), as the registry's facade does.
func BenchmarkProtoactorRequestFuture(b *testing.B) {
	system, pid := startEcho(b)
	b.ResetTimer()
	for range b.N {
		if _, err := system.Root.RequestFuture(pid, theTick, 10*time.Second).Result(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkProtoactorRequestFutureParallel: as above from 8 goroutines at
// once, as many as the concurrent registrants.
func BenchmarkProtoactorRequestFutureParallel(b *testing.B) {
	system, pid := startEcho(b)
	b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := system.Root.RequestFuture(pid, theTick, 10*time.Second).Result(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// pipelineWindow is how many commands the pipelined driver keeps in
// flight: enough that the registry never waits for it, few enough that
// the mailboxes stay small.
const pipelineWindow = 1024

// BenchmarkProtoactorRequestPipelined: the raw counterpart of
// BenchmarkPipelinedRegistrations, like with like: an actor keeps
// pipelineWindow requests in flight to an actor that answers each (ctx.Request
// and ctx.Respond, a reply per request as the registry gives), and sends
// the next one as each answer comes. One iteration is one request and its
// answer; the time runs until the last answer.
func BenchmarkProtoactorRequestPipelined(b *testing.B) {
	system, echo := startEcho(b)
	done := make(chan struct{})
	sent, answered := 0, 0
	b.ResetTimer()
	start := time.Now()
	driver := system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch ctx.Message().(type) {
		case *actor.Started:
			for ; sent < min(pipelineWindow, b.N); sent++ {
				ctx.Request(echo, theTick)
			}
		case *tick:
			if answered++; answered == b.N {
				close(done)
			}
			if sent < b.N {
				ctx.Request(echo, theTick)
				sent++
			}
		}
	}))
	b.Cleanup(func() { system.Root.Stop(driver) })
	<-done
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "round-trips/s")
}

// BenchmarkPipelinedRegistrations: an actor sends RegisterPlugin and
// DeregisterPlugin commands to the registry actor (reg.PID()) without
// waiting for each answer (pipelineWindow in flight); one subscriber actor,
// subscribed in batches, counts the events. One iteration is a register
// and a deregister: two commands answered, two events. It reports the
// commands answered per second (until the last answer; compare with
// BenchmarkProtoactorRequestPipelined's round trips, the same exchange
// with no registry work) and the events delivered per second (until the
// subscriber has the last one).
func BenchmarkPipelinedRegistrations(b *testing.B) {
	system, reg, counter := newCountedPlugvisor(b, registry.Config{Memory: registry.NewMemoryStore()})
	total := 2 * b.N

	subscribed, delivered := make(chan struct{}), make(chan struct{})
	events := 0
	sub := system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch msg := ctx.Message().(type) {
		case *actor.Started:
			ctx.Send(reg.PID(), &registry.SubscribeInBatches{
				Subscribe: &messages.Subscribe{Type: workload.PluginType, Subscriber: ctx.Self()},
			})
		case *messages.Subscribed:
			close(subscribed)
		case *registry.Events:
			if events += len(msg.Events); events == total {
				close(delivered)
			}
		}
	}))
	b.Cleanup(func() { system.Root.Stop(sub) })
	<-subscribed

	failed := make(chan error, 1)
	command := func(self *actor.PID, i int) any {
		alloc := fmt.Sprint("a", i/2)
		if i%2 == 0 {
			return &messages.RegisterPlugin{ReplyTo: self, Plugin: &messages.PluginInfo{
				Type: workload.PluginType, Name: "p", AllocId: alloc,
				Connection: &messages.ConnectionInfo{SocketPath: workload.SocketPath(alloc)},
			}}
		}
		return &messages.DeregisterPlugin{ReplyTo: self, Type: workload.PluginType, Name: "p", AllocId: alloc}
	}
	sent, answered := 0, 0
	allAnswered := make(chan time.Time, 1)
	answer := func(ctx actor.Context, err *messages.Error) {
		if err != nil {
			select {
			case failed <- messages.ErrorFromProto(err):
			default:
			}
			return
		}
		if answered++; answered == total {
			allAnswered <- time.Now()
		}
		if sent < total {
			ctx.Send(reg.PID(), command(ctx.Self(), sent))
			sent++
		}
	}

	batches, writes := counter.Batches()
	b.ResetTimer()
	start := time.Now()
	driver := system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch msg := ctx.Message().(type) {
		case *actor.Started:
			for sent < min(pipelineWindow, total) {
				ctx.Send(reg.PID(), command(ctx.Self(), sent))
				sent++
			}
		case *messages.RegisterPluginResponse:
			answer(ctx, msg.GetError())
		case *messages.DeregisterPluginResponse:
			answer(ctx, msg.GetError())
		}
	}))
	b.Cleanup(func() { system.Root.Stop(driver) })
	select {
	case <-delivered:
	case err := <-failed:
		b.Fatal(err)
	}
	b.ReportMetric(float64(total)/time.Since(start).Seconds(), "events/s")
	b.ReportMetric(float64(total)/(<-allAnswered).Sub(start).Seconds(), "commands/s")
	if nb, nw := counter.Batches(); nb > batches {
		b.ReportMetric(float64(nw-writes)/float64(nb-batches), "writes/batch")
	}
}

// BenchmarkGoroutineHandOver is the floor under any delivery of the
// registry's shape in plain Go, without protoactor or the registry: a
// caller hands a write to a worker goroutine and waits for its answer; the
// worker hands an event to a subscriber goroutine over a channel, works
// about as long as the registry's actor does after it (work), and
// answers. It reports the p50, p99 and p99.9 from the caller's hand-over
// to the subscriber's receipt, as BenchmarkDeliveryLatency does. Run it
// with -test.cpu 1,2: with two Ps, a send that readies a parked goroutine
// sometimes wakes the idle P's thread first (a futex wake; on a VM a
// wake-up of the other vCPU), which holds up the sender and what it
// readied.
func BenchmarkGoroutineHandOver(b *testing.B) {
	for _, work := range []time.Duration{0, 3 * time.Microsecond} {
		b.Run(fmt.Sprintf("work=%v", work), func(b *testing.B) {
			writes, answers := make(chan time.Time), make(chan struct{})
			events, arrived := make(chan time.Time, 1), make(chan time.Time, 1)
			go func() {
				for ev := range events {
					_ = ev
					arrived <- time.Now()
				}
			}()
			go func() {
				for start := range writes {
					events <- start
					for spin := time.Now(); time.Since(spin) < work; {
					}
					answers <- struct{}{}
				}
			}()
			b.Cleanup(func() { close(writes); close(events) })
			latencies := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				writes <- start
				<-answers
				latencies = append(latencies, (<-arrived).Sub(start))
			}
			b.StopTimer()
			workload.ReportPercentiles(b, latencies)
		})
	}
}
