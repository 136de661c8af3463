package plugintype

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Poller runs an instance's periodic check of its plugin (a health check,
// a fingerprint) off the actor's goroutine: one check at a time, each on a
// goroutine of its own bounded by a timeout, the next one interval after
// the last result. Results come back to the actor as messages, which
// Receive turns into the check's value. It is part of one actor
// incarnation's state: make it in Started and Stop it at Stopping and
// Restarting, which cancels the check in flight and waits for it, so that
// nothing outlives the incarnation.
type Poller[T any] struct {
	check    func(context.Context) T
	interval time.Duration
	timeout  time.Duration
	work     context.Context
	cancel   context.CancelFunc
	running  chan struct{} // closed once the check in flight is over; nil when none
	next     *time.Timer
}

// The poller's messages to its actor.
type (
	// pollDue is sent by the poller's timer when the next check is due.
	pollDue struct{ poller any }
	// polled is sent by a check's goroutine with its result.
	polled[T any] struct {
		poller *Poller[T]
		result T
	}
)

// NewPoller returns a poller running check every interval, each within
// timeout. Start starts it.
func NewPoller[T any](interval, timeout time.Duration, check func(context.Context) T) *Poller[T] {
	work, cancel := context.WithCancel(context.Background())
	return &Poller[T]{check: check, interval: interval, timeout: timeout, work: work, cancel: cancel}
}

// Start runs the first check now.
func (p *Poller[T]) Start(ctx actor.Context) {
	if p.running != nil || p.work.Err() != nil {
		return
	}
	done := make(chan struct{})
	p.running = done
	root, self := ctx.ActorSystem().Root, ctx.Self()
	go func() {
		defer close(done)
		work, cancel := context.WithTimeout(p.work, p.timeout)
		defer cancel()
		root.Send(self, &polled[T]{poller: p, result: p.check(work)})
	}()
}

// Receive handles the poller's own messages: it returns a check's result
// with ok set, having scheduled the next check. It reports ok false for
// any other message, for those of an earlier incarnation's poller, and
// always on a nil poller.
func (p *Poller[T]) Receive(ctx actor.Context) (result T, ok bool) {
	if p == nil {
		return result, false
	}
	switch msg := ctx.Message().(type) {
	case *pollDue:
		if msg.poller == p {
			p.next = nil
			p.Start(ctx)
		}
	case *polled[T]:
		if msg.poller != p || p.running == nil {
			return result, false
		}
		p.running = nil
		root, self := ctx.ActorSystem().Root, ctx.Self()
		p.next = time.AfterFunc(p.interval, func() { root.Send(self, &pollDue{poller: p}) })
		return msg.result, true
	}
	return result, false
}

// Stop stops the timer, cancels the check in flight and waits for it (it
// returns soon: its context has ended). A stopped poller does not start
// again. Stopping a nil poller does nothing.
func (p *Poller[T]) Stop() {
	if p == nil {
		return
	}
	if p.next != nil {
		p.next.Stop()
		p.next = nil
	}
	p.cancel()
	if p.running != nil {
		<-p.running
		p.running = nil
	}
}
