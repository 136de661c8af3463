package probe

import (
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// hold is the message on which HoldMiddleware keeps an actor waiting.
type hold struct{ held, gate chan struct{} }

// HoldMiddleware lets Hold keep an actor waiting; every other message goes
// on to the actor. Give it to the props of an actor under test with
// actor.WithReceiverMiddleware.
func HoldMiddleware(next actor.ReceiverFunc) actor.ReceiverFunc {
	return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
		if h, ok := env.Message.(*hold); ok {
			close(h.held)
			<-h.gate
			return
		}
		next(c, env)
	}
}

// Hold makes target, an actor given HoldMiddleware, wait once it has
// handled the messages sent to it before, until release is called or the
// test ends. Messages sent meanwhile queue behind the hold, system messages
// (a stop) included, so a test can choose the order in which the actor
// meets them. Hold returns once target waits, and fails the test when it
// does not within timeout.
func Hold(t TB, system *actor.ActorSystem, target *actor.PID, timeout time.Duration) (release func()) {
	t.Helper()
	h := &hold{held: make(chan struct{}), gate: make(chan struct{})}
	release = sync.OnceFunc(func() { close(h.gate) })
	t.Cleanup(release)
	system.Root.Send(target, h)
	select {
	case <-h.held:
	case <-time.After(timeout):
		t.Fatalf("probe: %v did not take the hold within %v", target, timeout)
	}
	return release
}
