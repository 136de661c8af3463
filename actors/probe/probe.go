// Package probe is a test kit for actors: a Probe is an actor with a PID
// that records every message it gets, so a test can send it as a reply or
// subscriber address and then assert, in order, what arrived.
//
// protoactor-go ships no test kit at the version plugvisor uses. A probe
// never blocks on a protoactor Future (a Future that times out while a
// reply is in flight is a data race upstream), and waits with timeouts
// instead of sleeps.
//
// Typical use:
//
//	system := probe.NewSystem(t)
//	p := probe.New(t, system)
//	p.Send(target, &messages.Subscribe{Subscriber: p.PID()})
//	ack := probe.Expect[*messages.Subscribed](t, p, time.Second)
//
// Messages from several actors, whose order nobody promises, are awaited
// with ExpectAll (one per matcher, in any order) or ExpectUnordered.
package probe

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"
)

// TB is the part of testing.TB a probe uses; *testing.T and *testing.B
// satisfy it. Fatalf must not return (testing.T's calls runtime.Goexit).
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// Received is one message a probe got, with the sender the message carried
// (nil when it was sent without one).
type Received struct {
	Message any
	Sender  *actor.PID
}

// Probe is an actor that records every user message it receives, and the
// Terminated of every actor it watches. Its lifecycle messages (Started,
// Stopping, Stopped) are not recorded. A Probe's methods are meant for the
// test goroutine.
type Probe struct {
	system *actor.ActorSystem
	pid    *actor.PID

	mu     sync.Mutex
	queue  []Received
	notify chan struct{}
}

type watchCommand struct {
	target *actor.PID
	done   chan struct{}
}

// New spawns a probe in system and stops it when the test ends.
func New(t TB, system *actor.ActorSystem) *Probe {
	t.Helper()
	p := &Probe{system: system, notify: make(chan struct{}, 1)}
	p.pid = system.Root.Spawn(actor.PropsFromFunc(p.receive))
	t.Cleanup(func() { system.Root.Stop(p.pid) })
	return p
}

// PID is the probe's address: give it as a reply-to or subscriber address.
func (p *Probe) PID() *actor.PID { return p.pid }

func (p *Probe) receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started, *actor.Stopping, *actor.Stopped, *actor.Restarting:
	case *watchCommand:
		ctx.Watch(msg.target)
		close(msg.done)
	default:
		p.record(Received{Message: msg, Sender: ctx.Sender()})
	}
}

func (p *Probe) record(r Received) {
	p.mu.Lock()
	p.queue = append(p.queue, r)
	p.mu.Unlock()
	select {
	case p.notify <- struct{}{}:
	default:
	}
}

// next pops the oldest recorded message, waiting up to timeout for one.
func (p *Probe) next(timeout time.Duration) (Received, bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		if len(p.queue) > 0 {
			r := p.queue[0]
			p.queue[0] = Received{}
			p.queue = p.queue[1:]
			p.mu.Unlock()
			return r, true
		}
		p.mu.Unlock()
		select {
		case <-p.notify:
		case <-deadline.C:
			return Received{}, false
		}
	}
}

// Next returns the next message the probe received, failing the test when
// none arrives within timeout.
func (p *Probe) Next(t TB, timeout time.Duration) Received {
	t.Helper()
	r, ok := p.next(timeout)
	if !ok {
		t.Fatalf("probe: no message arrived within %v", timeout)
	}
	return r
}

// Send sends msg to target with the probe as its sender, so that an actor
// answering with ctx.Respond answers the probe.
func (p *Probe) Send(target *actor.PID, msg any) {
	p.system.Root.RequestWithCustomSender(target, msg, p.pid)
}

// Expect returns the next message the probe received as a T. It fails the
// test, naming what arrived instead, when the next message is not a T or
// nothing arrives within timeout.
func Expect[T any](t TB, p *Probe, timeout time.Duration) T {
	t.Helper()
	return ExpectFrom[T](t, p, timeout).Message
}

// Request is a message a probe received together with its sender, so the
// test can play the part of the actor that was asked.
type Request[T any] struct {
	Message T
	Sender  *actor.PID
	probe   *Probe
}

// Respond sends reply to the request's sender, with the probe as sender.
func (r Request[T]) Respond(reply any) {
	r.probe.Send(r.Sender, reply)
}

// ExpectFrom is Expect that also returns the message's sender, for a test
// that answers requests sent to the probe.
func ExpectFrom[T any](t TB, p *Probe, timeout time.Duration) Request[T] {
	t.Helper()
	r, ok := p.next(timeout)
	if !ok {
		t.Fatalf("probe: expected %s within %v, but no message arrived", typeName[T](), timeout)
	}
	msg, isT := r.Message.(T)
	if !isT {
		t.Fatalf("probe: expected %s, got %T: %s", typeName[T](), r.Message, describe(r.Message))
	}
	return Request[T]{Message: msg, Sender: r.Sender, probe: p}
}

// Ask sends msg to target with the probe as sender and expects a T back
// within timeout. It is request/reply without a Future.
func Ask[T any](t TB, p *Probe, target *actor.PID, msg any, timeout time.Duration) T {
	t.Helper()
	p.Send(target, msg)
	return Expect[T](t, p, timeout)
}

// FishFor skips messages until one is a T for which match returns true, and
// returns it. It fails the test when none arrives within timeout, listing
// what it skipped. A nil match accepts any T.
func FishFor[T any](t TB, p *Probe, timeout time.Duration, match func(T) bool) T {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var skipped []string
	for {
		r, ok := p.next(time.Until(deadline))
		if !ok {
			t.Fatalf("probe: no matching %s within %v; skipped %d: [%s]",
				typeName[T](), timeout, len(skipped), strings.Join(skipped, ", "))
		}
		if msg, isT := r.Message.(T); isT && (match == nil || match(msg)) {
			return msg
		}
		skipped = append(skipped, fmt.Sprintf("%T", r.Message))
	}
}

// ExpectMessages expects the next messages to equal want, in that order,
// each within timeout. Protobuf messages are compared with proto.Equal,
// others with reflect.DeepEqual.
func (p *Probe) ExpectMessages(t TB, timeout time.Duration, want ...any) {
	t.Helper()
	for i, w := range want {
		r, ok := p.next(timeout)
		if !ok {
			t.Fatalf("probe: message %d of %d: expected %T %s within %v, but no message arrived",
				i+1, len(want), w, describe(w), timeout)
		}
		if !equal(w, r.Message) {
			t.Fatalf("probe: message %d of %d: expected %T %s, got %T %s",
				i+1, len(want), w, describe(w), r.Message, describe(r.Message))
		}
	}
}

// ExpectNone waits d and fails the test if any message arrived meanwhile.
func (p *Probe) ExpectNone(t TB, d time.Duration) {
	t.Helper()
	if r, ok := p.next(d); ok {
		t.Fatalf("probe: expected no message for %v, got %T: %s", d, r.Message, describe(r.Message))
	}
}

// Watch makes the probe watch target; it returns once the watch is in place.
// A target that is already gone yields a Terminated at once.
func (p *Probe) Watch(t TB, target *actor.PID) {
	t.Helper()
	done := make(chan struct{})
	p.system.Root.Send(p.pid, &watchCommand{target: target, done: done})
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("probe: watching %s did not take effect within 5s", target)
	}
}

// ExpectTerminated expects the next message to be the Terminated of target,
// which the probe must be watching.
func (p *Probe) ExpectTerminated(t TB, target *actor.PID, timeout time.Duration) {
	t.Helper()
	got := Expect[*actor.Terminated](t, p, timeout)
	if !got.Who.Equal(target) {
		t.Fatalf("probe: expected Terminated of %s, got Terminated of %s", target, got.Who)
	}
}

func equal(want, got any) bool {
	wm, wok := want.(proto.Message)
	gm, gok := got.(proto.Message)
	if wok && gok {
		return proto.Equal(wm, gm)
	}
	return reflect.DeepEqual(want, got)
}

func describe(msg any) string {
	if m, ok := msg.(proto.Message); ok && !reflect.ValueOf(m).IsNil() {
		return fmt.Sprintf("{%v}", m)
	}
	return fmt.Sprintf("%+v", msg)
}

func typeName[T any]() string {
	return reflect.TypeFor[T]().String()
}
