package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/errclass"
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
var ErrLagged = errclass.New(errclass.Limit, "subscriber fell too far behind")

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
// It never blocks the registry: the registry actor puts each batch's
// events straight into C's buffer, and when the buffer is full, into a
// backlog that a goroutine moves into C as the reader makes room, in
// order, none lost. If more than MaxBacklog events wait for the reader (in
// C's buffer and the backlog), the subscription ends: C closes after the
// events already in its buffer and Lagged reports true, so the reader
// knows to subscribe again with Replay and resynchronise (as a Kubernetes
// watch that falls too far behind must re-list). C also closes when ctx
// ends and, after every event sent before, when the registry shuts down.
// Once C is closed, Err says which.
type Subscription struct {
	// C delivers the events in sequence order.
	C <-chan Event
	// Sequence is the sequence number of the registry state the
	// subscription started from: replayed events carry it or a smaller
	// one, and every live event has a greater one.
	Sequence uint64

	sink *channelSink
}

// Err says why C closed: ErrLagged when the reader fell too far behind,
// ErrShutdown when the registry shut down, or the context's error (wrapping
// context.Canceled or context.DeadlineExceeded) when ctx ended. It is nil
// while C is open.
func (s *Subscription) Err() error {
	s.sink.mu.Lock()
	defer s.sink.mu.Unlock()
	if !s.sink.closed {
		return nil
	}
	return s.sink.ended
}

// Lagged reports whether the subscription ended because its reader fell
// more than MaxBacklog events behind.
func (s *Subscription) Lagged() bool { return errors.Is(s.Err(), ErrLagged) }

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
		return nil, errorf(ErrShutdown, "the subscription came after Shutdown")
	}
	if !r.channels.acquire() {
		return nil, errorf(ErrLimit, "%d subscriptions are open, the limit (registry.Limits.Subscribers, agent flag -max-subscribers); "+
			"close one or raise the limit", r.channels.max)
	}
	sink := newChannelSink(ptype, opts.MaxBacklog)
	sink.release = func() {
		r.channels.release()
		if !errors.Is(sink.ended, ErrShutdown) { // else the stopping registry forgets it
			r.system.Root.Send(r.pid, &unsubscribeChannel{sink: sink})
		}
	}
	sink.mu.Lock()
	sink.stopAfter = context.AfterFunc(ctx, func() {
		sink.end(fmt.Errorf("subscription to %q ended by its context: %w", ptype, ctx.Err()), true)
	})
	sink.mu.Unlock()
	r.system.Root.Send(r.pid, &subscribeChannel{sink: sink, replay: opts.Replay})
	select {
	case <-sink.ready:
	case <-time.After(r.timeout):
		sink.end(errorf(ErrTimeout, "no answer from the registry actor within %v: %w", r.timeout, actor.ErrTimeout), true)
		return nil, sink.ended
	}
	return &Subscription{C: sink.out, Sequence: sink.sequence, sink: sink}, nil
}

// subscribeChannel is the facade's channel subscription, sent to the
// registry actor; the actor answers by closing the sink's ready.
type subscribeChannel struct {
	sink   *channelSink
	replay bool
}

// unsubscribeChannel tells the registry actor that a channel subscription
// ended.
type unsubscribeChannel struct{ sink *channelSink }

// onSubscribeChannel adds a channel subscription, with its replay first,
// unless it has ended already (its context may end before it arrives).
func (a *pluginsActor) onSubscribeChannel(msg *subscribeChannel) {
	sink := msg.sink
	if msg.replay {
		sink.push(a.committed.replay(sink.ptype))
	}
	sink.sequence = a.committed.sequence
	if sink.running() {
		a.subs.addSink(sink)
		a.metrics.Subscribers(a.subs.len())
	}
	close(sink.ready)
}

func (a *pluginsActor) onUnsubscribeChannel(msg *unsubscribeChannel) {
	a.subs.removeSink(msg.sink)
	a.metrics.Subscribers(a.subs.len())
}

// channelBuffer is the most events a channel subscription's C buffers.
const channelBuffer = 128

// channelSink is a channel subscription as the registry actor sees it:
// push, on the actor's goroutine, never blocks. The sink owns its
// backlog, guarded by mu, which the actor and the drain goroutine share.
type channelSink struct {
	ptype      string
	out        chan Event
	maxBacklog int // beyond out's buffer

	ready    chan struct{} // closed by the actor once subscribed
	sequence uint64        // set before ready closes

	release   func()      // frees the subscription's slot, once out closed
	stopAfter func() bool // stops the context's watch

	mu       sync.Mutex
	backlog  []Event       // events waiting for room in out, in order
	taken    int           // events the drain goroutine took and is sending
	draining bool          // the drain goroutine runs
	ended    error         // why the subscription ended; nil while it runs
	abort    chan struct{} // closed when what is undelivered is dropped
	closed   bool          // out is closed
}

func newChannelSink(ptype string, maxBacklog int) *channelSink {
	buffer := min(maxBacklog, channelBuffer)
	return &channelSink{ptype: ptype, out: make(chan Event, buffer), maxBacklog: maxBacklog - buffer,
		ready: make(chan struct{}), abort: make(chan struct{})}
}

// push hands events to the reader, straight into out while nothing waits
// before them, and reports false once the subscription has ended.
func (s *channelSink) push(events []Event) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended != nil {
		return false
	}
	if !s.draining {
		for len(events) > 0 {
			select {
			case s.out <- events[0]:
				events = events[1:]
				continue
			default:
			}
			break
		}
		if len(events) == 0 {
			return true
		}
	}
	if len(s.backlog)+s.taken+len(events) > s.maxBacklog {
		s.endLocked(fmt.Errorf("%w: more than %d events were waiting for the reader of %q",
			ErrLagged, s.maxBacklog+cap(s.out), s.ptype), true)
		return false
	}
	s.backlog = append(s.backlog, events...)
	if !s.draining {
		s.draining = true
		go s.drain()
	}
	return true
}

// drain moves the backlog into out as the reader makes room, until the
// backlog is empty or the subscription is aborted.
func (s *channelSink) drain() {
	for {
		s.mu.Lock()
		batch := s.backlog
		s.backlog, s.taken = nil, len(batch)
		if len(batch) == 0 {
			s.draining = false
			if s.ended != nil {
				s.closeLocked()
			}
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		for _, ev := range batch {
			select {
			case s.out <- ev:
			case <-s.abort:
				s.mu.Lock()
				s.draining = false
				s.closeLocked()
				s.mu.Unlock()
				return
			}
		}
	}
}

// running reports whether the subscription has not ended; once it ends,
// its release tells the registry actor to forget it.
func (s *channelSink) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended == nil
}

// end ends the subscription for err: with abort, what the reader has not
// got yet beyond out's buffer is dropped; without, it is delivered first.
func (s *channelSink) end(err error, abort bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endLocked(err, abort)
}

func (s *channelSink) endLocked(err error, abort bool) {
	if s.ended == nil {
		s.ended = err
	}
	if abort && !isClosed(s.abort) {
		s.backlog = nil
		close(s.abort)
	}
	if !s.draining {
		s.closeLocked()
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// closeLocked closes out, once, and frees the subscription.
func (s *channelSink) closeLocked() {
	if s.closed {
		return
	}
	s.closed = true
	s.stopAfter()
	s.release() // first: a reader that sees out closed may subscribe again
	close(s.out)
}
