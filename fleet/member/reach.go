package member

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"

	"github.com/plugvisor/plugvisor/messages"
)

// pingActorName is the name of every member's ping actor.
const pingActorName = "plugvisor-ping"

// pingInterval is how often a member pings every other member it sees;
// a member that has not answered for unreachableAfter is unreachable.
const (
	pingInterval     = time.Second
	unreachableAfter = 3 * pingInterval
)

// reach is what a member hears back from the others: when each member it
// sees last answered its ping. Its ping actor writes, the prober and the
// health read; a mutex guards the map, as three goroutines share it.
type reach struct {
	mu    sync.Mutex
	heard map[string]time.Time // member ID → last pong, or first seen
}

// pingActor answers pings and notes pongs; it runs in every incarnation.
type pingActor struct {
	self  string
	reach *reach
}

// Receive dispatches the ping actor's messages.
func (p *pingActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *messages.MemberPing:
		if ctx.Sender() != nil {
			ctx.Respond(&messages.MemberPong{Member: p.self})
		}
	case *messages.MemberPong:
		p.reach.heardFrom(msg.GetMember(), time.Now())
	}
}

func (r *reach) heardFrom(member string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, seen := r.heard[member]; seen {
		r.heard[member] = at
	}
}

// seeing keeps the members of the topology, noting a new one as heard now
// (it gets unreachableAfter to answer), and forgets those that left.
func (r *reach) seeing(members []*cluster.Member, self string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id := range r.heard {
		if !slices.ContainsFunc(members, func(m *cluster.Member) bool { return m.Id == id }) {
			delete(r.heard, id)
		}
	}
	for _, m := range members {
		if _, seen := r.heard[m.Id]; !seen && m.Id != self {
			r.heard[m.Id] = now
		}
	}
}

// Unreachable says, sorted, of each member this member sees and has not
// heard from for longer than unreachableAfter, which it is, where it
// listens and how long it has not answered: changes of the volumes whose
// grains it runs then wait or fail through this member. It is empty while
// every member answers.
func (m *Member) Unreachable() []string {
	now := time.Now()
	addresses := map[string]string{}
	for _, mem := range *m.topology.Load() {
		addresses[mem.Id] = mem.Address()
	}
	m.reach.mu.Lock()
	defer m.reach.mu.Unlock()
	var out []string
	for id, at := range m.reach.heard {
		if since := now.Sub(at); since > unreachableAfter && addresses[id] != "" {
			out = append(out, fmt.Sprintf("member %s at %s has not answered for %v", id, addresses[id], since.Round(100*time.Millisecond)))
		}
	}
	slices.Sort(out)
	return out
}

// spawnPing starts inc's ping actor.
func (m *Member) spawnPing(inc *incarnation) error {
	self := inc.system.ID
	props := actor.PropsFromProducer(func() actor.Actor { return &pingActor{self: self, reach: m.reach} })
	_, err := inc.system.Root.SpawnNamed(props, pingActorName)
	return err
}

// probe pings every other member each pingInterval until ctx ends. Pings
// are messages, not futures: a member that does not answer costs nothing
// but its silence.
func (m *Member) probe(ctx context.Context) {
	tick := time.NewTicker(pingInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		inc := m.current.Load()
		if inc == nil {
			continue
		}
		members := *m.topology.Load()
		m.reach.seeing(members, inc.system.ID, time.Now())
		from := actor.NewPID(inc.system.Address(), pingActorName)
		for _, mem := range members {
			if mem.Id != inc.system.ID {
				inc.system.Root.RequestWithCustomSender(actor.NewPID(mem.Address(), pingActorName), &messages.MemberPing{Member: inc.system.ID}, from)
			}
		}
	}
}
