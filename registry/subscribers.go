package registry

import (
	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"
)

// subscribers is the registry actor's record of who gets which events:
// PIDs by plugin type ("" for every type). It is part of the actor's state
// and used only on its goroutine.
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
	byType map[string]*actor.PIDSet
	// refs counts each PID's subscriptions, to watch it once.
	refs map[string]int
}

func newSubscribers() *subscribers {
	return &subscribers{byType: map[string]*actor.PIDSet{}, refs: map[string]int{}}
}

func pidKey(pid *actor.PID) string { return pid.GetAddress() + "/" + pid.GetId() }

func (s *subscribers) add(ctx actor.Context, ptype string, pid *actor.PID) {
	set, ok := s.byType[ptype]
	if !ok {
		set = actor.NewPIDSet()
		s.byType[ptype] = set
	}
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
	set, ok := s.byType[ptype]
	if !ok || !set.Contains(pid) {
		return
	}
	set.Remove(pid)
	key := pidKey(pid)
	if s.refs[key]--; s.refs[key] == 0 {
		delete(s.refs, key)
		ctx.Unwatch(pid)
	}
}

// drop forgets every subscription of a PID that has terminated.
func (s *subscribers) drop(pid *actor.PID) {
	for _, set := range s.byType {
		set.Remove(pid)
	}
	delete(s.refs, pidKey(pid))
}

func (s *subscribers) len() int { return len(s.refs) }

// publish sends event to the subscribers of ptype and of every type, once
// to each PID, and returns how many it reached.
func (s *subscribers) publish(ctx actor.Context, ptype string, event proto.Message) int {
	n := 0
	all := s.byType[""]
	if set, ok := s.byType[ptype]; ok && ptype != "" {
		set.ForEach(func(_ int, pid *actor.PID) {
			if all == nil || !all.Contains(pid) {
				ctx.Send(pid, event)
				n++
			}
		})
	}
	if all != nil {
		all.ForEach(func(_ int, pid *actor.PID) {
			ctx.Send(pid, event)
			n++
		})
	}
	return n
}
