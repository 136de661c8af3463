package registry

import (
	"slices"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/plugvisor/plugvisor/messages"
)

// SubscribeInBatches is messages.Subscribe for a subscriber that takes its
// events in batches: one *Events per committed batch of writes that has
// events of its type, instead of one message per event. The registry
// answers messages.Subscribed as for Subscribe, with current left empty;
// when replay is asked for, an *Events with Replayed set follows at once,
// holding the current allocation of every plugin of the type as
// PluginRegistered events, each with the sequence of the last event that
// changed it. Unsubscribe ends it as any subscription.
//
// It is a Go value, not a protobuf message: only actors in the registry's
// process can send it.
type SubscribeInBatches struct {
	Subscribe *messages.Subscribe
}

// Events is what a subscriber in batches receives: events in sequence
// order. The slice is shared with the other subscribers: read it, never
// change it.
type Events struct {
	Events []Event
	// Replayed marks the state replayed at subscription: every event in it
	// has a sequence no greater than Subscribed.sequence.
	Replayed bool
}

// subscribers is the registry actor's record of who gets which events:
// PIDs by plugin type ("" for every type), each taking events one message
// per event or in batches. It is part of the actor's state and used only
// on its goroutine.
//
// The contract, for every subscriber:
//   - it gets the events of its type in sequence order, each once (also
//     when it subscribed both to the type and to every type), after the
//     Subscribed that acknowledged it;
//   - no event is lost while it lives: events go into its mailbox, which
//     has no bound;
//   - a slow or stuck subscriber delays nobody: sending is an enqueue, so
//     registration, listing and the other subscribers go on at full speed
//     while its mailbox grows;
//   - a dead subscriber leaves by itself: the registry watches each one and
//     drops all its subscriptions on Terminated.
type subscribers struct {
	single  map[string]*actor.PIDSet // one message per event
	batched map[string]*actor.PIDSet // one *Events per batch
	// refs counts each PID's subscriptions, to watch it once.
	refs map[string]int
	// sinks are the channel subscriptions (Registry.Subscribe), by type.
	sinks map[string][]*channelSink
}

func newSubscribers() *subscribers {
	return &subscribers{single: map[string]*actor.PIDSet{}, batched: map[string]*actor.PIDSet{}, refs: map[string]int{},
		sinks: map[string][]*channelSink{}}
}

func pidKey(pid *actor.PID) string { return pid.GetAddress() + "/" + pid.GetId() }

func setOf(sets map[string]*actor.PIDSet, ptype string) *actor.PIDSet {
	set, ok := sets[ptype]
	if !ok {
		set = actor.NewPIDSet()
		sets[ptype] = set
	}
	return set
}

// add subscribes pid to ptype; subscribing again to the same type changes
// only how it takes its events.
func (s *subscribers) add(ctx actor.Context, ptype string, pid *actor.PID, batched bool) {
	into, other := s.single, s.batched
	if batched {
		into, other = other, into
	}
	if set, ok := other[ptype]; ok && set.Contains(pid) {
		set.Remove(pid)
		setOf(into, ptype).Add(pid)
		return
	}
	set := setOf(into, ptype)
	if set.Contains(pid) {
		return
	}
	set.Add(pid)
	key := pidKey(pid)
	if s.refs[key] == 0 {
		ctx.Watch(pid)
	}
	s.refs[key]++
}

func (s *subscribers) remove(ctx actor.Context, ptype string, pid *actor.PID) {
	if !s.removeFrom(s.single, ptype, pid) && !s.removeFrom(s.batched, ptype, pid) {
		return
	}
	key := pidKey(pid)
	if s.refs[key]--; s.refs[key] == 0 {
		delete(s.refs, key)
		ctx.Unwatch(pid)
	}
}

func (s *subscribers) removeFrom(sets map[string]*actor.PIDSet, ptype string, pid *actor.PID) bool {
	set, ok := sets[ptype]
	if !ok || !set.Contains(pid) {
		return false
	}
	set.Remove(pid)
	return true
}

// drop forgets every subscription of a PID that has terminated.
func (s *subscribers) drop(pid *actor.PID) {
	for _, set := range s.single {
		set.Remove(pid)
	}
	for _, set := range s.batched {
		set.Remove(pid)
	}
	delete(s.refs, pidKey(pid))
}

func (s *subscribers) len() int {
	n := len(s.refs)
	for _, sinks := range s.sinks {
		n += len(sinks)
	}
	return n
}

func (s *subscribers) addSink(sink *channelSink) {
	s.sinks[sink.ptype] = append(s.sinks[sink.ptype], sink)
}

func (s *subscribers) removeSink(sink *channelSink) {
	sinks := slices.DeleteFunc(s.sinks[sink.ptype], func(x *channelSink) bool { return x == sink })
	if len(sinks) == 0 {
		delete(s.sinks, sink.ptype)
		return
	}
	s.sinks[sink.ptype] = sinks
}

// endSinks ends every channel subscription as the registry stops: each
// channel closes once its reader has the events sent before.
func (s *subscribers) endSinks() {
	for ptype, sinks := range s.sinks {
		for _, sink := range sinks {
			sink.end(ErrShutdown, false)
		}
		delete(s.sinks, ptype)
	}
}

// pushTo hands events to the channel subscriptions of ptype, forgetting
// those that have ended.
func (s *subscribers) pushTo(ptype string, events []Event) int {
	sinks, ok := s.sinks[ptype]
	if !ok {
		return 0
	}
	n := 0
	var ended []*channelSink
	for _, sink := range sinks {
		if sink.push(events) {
			n += len(events)
		} else {
			ended = append(ended, sink)
		}
	}
	for _, sink := range ended {
		s.removeSink(sink)
	}
	return n
}

// toEveryType reports whether pid subscribed to every type, and so gets
// its events through that subscription.
func (s *subscribers) toEveryType(pid *actor.PID) bool {
	for _, sets := range []map[string]*actor.PIDSet{s.single, s.batched} {
		if set, ok := sets[""]; ok && set.Contains(pid) {
			return true
		}
	}
	return false
}

// publish sends a committed batch's events, in sequence order, to the
// subscribers of their type and of every type, once to each PID, and
// returns how many events it handed over.
func (s *subscribers) publish(ctx actor.Context, events []Event) int {
	if len(events) == 0 {
		return 0
	}
	n := s.send(ctx, "", events, nil)
	if ptype, ok := oneType(events); ok {
		return n + s.send(ctx, ptype, events, s.toEveryType)
	}
	for ptype, evs := range byType(events) {
		n += s.send(ctx, ptype, evs, s.toEveryType)
	}
	return n
}

// send hands events to the subscribers of ptype that skip does not rule
// out.
func (s *subscribers) send(ctx actor.Context, ptype string, events []Event, skip func(*actor.PID) bool) int {
	n := 0
	if set, ok := s.single[ptype]; ok {
		set.ForEach(func(_ int, pid *actor.PID) {
			if skip == nil || !skip(pid) {
				for _, ev := range events {
					ctx.Send(pid, ev)
				}
				n += len(events)
			}
		})
	}
	if set, ok := s.batched[ptype]; ok && set.Len() > 0 {
		batch := &Events{Events: events}
		set.ForEach(func(_ int, pid *actor.PID) {
			if skip == nil || !skip(pid) {
				ctx.Send(pid, batch)
				n += len(events)
			}
		})
	}
	return n + s.pushTo(ptype, events)
}

// oneType returns the plugin type of events when they all have the same,
// the usual case.
func oneType(events []Event) (string, bool) {
	first := events[0].GetPlugin().GetType()
	for _, ev := range events[1:] {
		if ev.GetPlugin().GetType() != first {
			return "", false
		}
	}
	return first, true
}

// byType splits events by plugin type, keeping their order.
func byType(events []Event) map[string][]Event {
	out := map[string][]Event{}
	for _, ev := range events {
		t := ev.GetPlugin().GetType()
		out[t] = append(out[t], ev)
	}
	return out
}

func (a *pluginsActor) onSubscribe(ctx actor.Context, msg *messages.Subscribe, batched bool) {
	sub := msg.GetSubscriber()
	if sub == nil {
		a.log.Warn("subscribe without a subscriber address: ignored", "sender", ctx.Sender())
		return
	}
	if msg.GetType() != "" {
		if err := ValidateID("plugin type", msg.GetType()); err != nil {
			a.log.Warn("subscribe refused", "subscriber", sub, "error", err)
			return
		}
	}
	a.subs.add(ctx, msg.GetType(), sub, batched)
	a.metrics.Subscribers(a.subs.len())
	ack := &messages.Subscribed{Type: msg.GetType(), Sequence: a.committed.sequence}
	if msg.GetReplay() && !batched {
		ack.Current = a.committed.List(msg.GetType())
	}
	ctx.Send(sub, ack)
	if msg.GetReplay() && batched {
		ctx.Send(sub, &Events{Events: a.committed.replay(msg.GetType()), Replayed: true})
	}
}

func (a *pluginsActor) onUnsubscribe(ctx actor.Context, msg *messages.Unsubscribe) {
	sub := msg.GetSubscriber()
	if sub == nil {
		return
	}
	a.subs.remove(ctx, msg.GetType(), sub)
	a.metrics.Subscribers(a.subs.len())
	ctx.Send(sub, &messages.Unsubscribed{Type: msg.GetType()})
}
