package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/messages"
)

// Event is what a channel subscription delivers: a *messages.PluginRegistered,
// *messages.PluginUpdated or *messages.PluginDeregistered.
type Event interface {
	proto.Message
	GetPlugin() *messages.PluginInfo
	GetSequence() uint64
}

// DefaultMaxBacklog is how many events a channel subscription holds for a
// reader that has fallen behind before it gives up on that reader.
const DefaultMaxBacklog = 65536

// ErrLagged: a channel subscription's reader fell more than MaxBacklog
// events behind and the subscription ended; subscribe again with Replay to
// resynchronise.
var ErrLagged = errors.New("registry: subscriber fell too far behind")

// SubscribeOptions shape a channel subscription.
type SubscribeOptions struct {
	// Replay delivers the current allocation of every plugin of the type
	// first, as PluginRegistered events, each carrying the sequence of the
	// last event that changed that allocation.
	Replay bool
	// MaxBacklog bounds the events held for a slow reader (default
	// DefaultMaxBacklog).
	MaxBacklog int
}

// Subscription delivers one plugin type's events to a Go channel, for code
// that is not an actor.
//
// It never blocks the registry: an adapter actor takes the events and a
// goroutine hands them to the channel. When the reader falls behind, events
// wait in the adapter, in order, none lost; if more than MaxBacklog are
// waiting, the subscription ends: the channel closes after the events
// already handed over and Lagged reports true, so the reader knows to
// subscribe again with Replay and resynchronise (as a Kubernetes watch that
// falls too far behind must re-list). The channel also closes when ctx ends
// and when the registry shuts down. Once C is closed, Err says which.
type Subscription struct {
	// C delivers the events in sequence order.
	C <-chan Event
	// Sequence is the sequence number of the registry state the
	// subscription started from: replayed events carry it or a smaller
	// one, and every live event has a greater one.
	Sequence uint64

	lagged chan struct{}
	ended  *atomic.Pointer[error]
}

// Err says why C closed: ErrLagged when the reader fell too far behind,
// ErrShutdown when the registry shut down, or the context's error (wrapping
// context.Canceled or context.DeadlineExceeded) when ctx ended. It is nil
// while C is open.
func (s *Subscription) Err() error {
	if err := s.ended.Load(); err != nil {
		return *err
	}
	return nil
}

// Lagged reports whether the subscription ended because its reader fell
// more than MaxBacklog events behind.
func (s *Subscription) Lagged() bool { return isClosed(s.lagged) }

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// PluginsUpdatedCh returns a channel of the events of ptype ("" for every
// type), with the signature of Nomad's registry. It closes when ctx ends or
// the registry shuts down.
//
// Its signature has no room for an error: a subscription Subscribe would
// refuse (a bad type, the limit on subscriptions reached, a registry shut
// down) is a channel that is already closed, and the refusal is logged as
// a warning. Call Subscribe to get the refusal as an error.
func (r *Registry) PluginsUpdatedCh(ctx context.Context, ptype string) <-chan Event {
	sub, err := r.Subscribe(ctx, ptype, SubscribeOptions{})
	if err != nil {
		r.log.Warn("PluginsUpdatedCh: subscription refused; its channel is closed (Subscribe returns the error)",
			"type", ptype, "error", err)
		ch := make(chan Event)
		close(ch)
		return ch
	}
	return sub.C
}

// Subscribe starts a channel subscription to the events of ptype ("" for
// every type). Events that happen after Subscribe returns are delivered.
//
// A refusal is an error, and nothing is started: ErrInvalid for a bad
// type, ErrLimit when Limits.Subscribers subscriptions are open, and
// ErrShutdown once the registry is shut down.
func (r *Registry) Subscribe(ctx context.Context, ptype string, opts SubscribeOptions) (*Subscription, error) {
	if ptype != "" {
		if err := ValidateID("plugin type", ptype); err != nil {
			return nil, err
		}
	}
	if opts.MaxBacklog <= 0 {
		opts.MaxBacklog = DefaultMaxBacklog
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return nil, errorf(ErrShutdown, "registry is shut down")
	}
	if !r.channels.acquire() {
		return nil, errorf(ErrLimit, "%d subscriptions are open, the limit (registry.Limits.Subscribers, agent flag -max-subscribers); "+
			"close one or raise the limit", r.channels.max)
	}
	out := make(chan Event)
	a := &channelAdapter{
		registry:   r.pid,
		ptype:      ptype,
		replay:     opts.Replay,
		maxBacklog: opts.MaxBacklog,
		wake:       make(chan struct{}, 1),
		subscribed: make(chan struct{}),
		ended:      make(chan struct{}),
		lagged:     make(chan struct{}),
	}
	pid := r.system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return a }))
	ended := &atomic.Pointer[error]{}
	go a.pump(ctx, out, ended, func() {
		r.system.Root.Stop(pid)
		r.channels.release()
	})
	select {
	case <-a.subscribed:
	case <-a.ended:
	}
	return &Subscription{C: out, lagged: a.lagged, ended: ended, Sequence: a.sequence}, nil
}

// registryGone is the adapter's note to itself that the registry stopped.
type registryGone struct{}

// channelAdapter is the actor that subscribes on behalf of a channel. It
// owns the backlog of events not yet handed to the reader; its pump
// goroutine drains it into the channel.
type channelAdapter struct {
	registry   *actor.PID
	ptype      string
	replay     bool
	maxBacklog int

	mu      sync.Mutex
	backlog []Event
	wake    chan struct{}

	sequence   uint64        // from Subscribed, set before subscribed closes
	subscribed chan struct{} // closed on Subscribed
	ended      chan struct{} // closed when the actor stops
	lagged     chan struct{} // closed when the reader fell too far behind
}

// Receive subscribes at start, queues events, and ends the subscription
// when the registry goes away or the reader lags.
func (a *channelAdapter) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		ctx.Watch(a.registry)
		ctx.Send(a.registry, &SubscribeInBatches{
			Subscribe: &messages.Subscribe{Type: a.ptype, Subscriber: ctx.Self(), Replay: a.replay},
		})
	case *messages.Subscribed:
		a.sequence = msg.GetSequence()
		close(a.subscribed)
	case *Events:
		a.push(ctx, msg.Events)
	case *actor.Terminated:
		// The registry is gone. Terminated is a system message and can
		// overtake the registry's last events in the mailbox: stop only
		// after them, when this note to self comes through.
		ctx.Send(ctx.Self(), registryGone{})
	case registryGone:
		ctx.Stop(ctx.Self())
	case *actor.Stopping:
		ctx.Unwatch(a.registry)
	case *actor.Stopped:
		close(a.ended)
	}
}

func (a *channelAdapter) push(ctx actor.Context, events []Event) {
	a.mu.Lock()
	over := len(a.backlog)+len(events) > a.maxBacklog
	if !over {
		a.backlog = append(a.backlog, events...)
	}
	a.mu.Unlock()
	if over {
		close(a.lagged)
		ctx.Stop(ctx.Self())
		return
	}
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

func (a *channelAdapter) pop() (Event, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.backlog) == 0 {
		return nil, false
	}
	ev := a.backlog[0]
	a.backlog[0] = nil
	a.backlog = a.backlog[1:]
	return ev, true
}

// pump hands the backlog to out until ctx ends or the actor stops, then
// records why in ended, closes out and makes sure the actor is stopped.
func (a *channelAdapter) pump(ctx context.Context, out chan<- Event, ended *atomic.Pointer[error], stop func()) {
	err := a.drain(ctx, out)
	ended.Store(&err)
	stop()
	close(out)
}

func (a *channelAdapter) drain(ctx context.Context, out chan<- Event) error {
	cancelled := func() error {
		return fmt.Errorf("registry: subscription to %q ended by its context: %w", a.ptype, ctx.Err())
	}
	for {
		ev, ok := a.pop()
		if !ok {
			select {
			case <-a.wake:
				continue
			case <-a.ended:
				if isClosed(a.lagged) {
					return fmt.Errorf("%w: more than %d events were waiting for the reader of %q", ErrLagged, a.maxBacklog, a.ptype)
				}
				if ev, ok = a.pop(); !ok {
					return errorf(ErrShutdown, "the registry shut down")
				}
			case <-ctx.Done():
				return cancelled()
			}
		}
		select {
		case out <- ev:
		case <-ctx.Done():
			return cancelled()
		}
	}
}
