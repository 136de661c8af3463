package plugintype

import (
	"github.com/asynkron/protoactor-go/actor"
)

// Subscribers is an actor's record of who hears its events: a set of PIDs,
// each watched so that one that terminates leaves by itself (the owner
// passes its Terminated to Drop). It is part of the owner's state and used
// only on the owner's goroutine.
//
// The contract it gives each subscriber: events in the order the owner
// publishes them, none lost while the subscriber lives (mailboxes have no
// bound), and a slow subscriber delays nobody (publishing is an enqueue).
type Subscribers struct {
	set *actor.PIDSet
}

// NewSubscribers returns an empty set.
func NewSubscribers() *Subscribers {
	return &Subscribers{set: actor.NewPIDSet()}
}

// Add subscribes pid and watches it; it reports false when pid was
// subscribed already (or is nil).
func (s *Subscribers) Add(ctx actor.Context, pid *actor.PID) bool {
	if pid == nil || s.set.Contains(pid) {
		return false
	}
	s.set.Add(pid)
	ctx.Watch(pid)
	return true
}

// Subscribe handles a subscription message: it subscribes pid (the
// message's sender when pid is nil) and sends it each of replay first, in
// order. It reports false when there was nobody to subscribe.
func (s *Subscribers) Subscribe(ctx actor.Context, pid *actor.PID, replay ...any) bool {
	if pid == nil {
		pid = ctx.Sender()
	}
	if pid == nil {
		return false
	}
	s.Add(ctx, pid)
	for _, msg := range replay {
		ctx.Send(pid, msg)
	}
	return true
}

// Drop forgets pid, and reports whether it was subscribed.
func (s *Subscribers) Drop(pid *actor.PID) bool {
	return s.set.Remove(pid)
}

// Publish sends event to every subscriber.
func (s *Subscribers) Publish(ctx actor.Context, event any) {
	s.set.ForEach(func(_ int, pid *actor.PID) { ctx.Send(pid, event) })
}

// Len is the number of subscribers.
func (s *Subscribers) Len() int { return s.set.Len() }
