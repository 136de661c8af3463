package registry

import (
	"sync"
	"time"
)

// inbox is where the facade's callers leave their writes for the registry
// actor: a shared queue with one wake-up message per batch instead of a
// protoactor Future and a message per call. The first caller to find the
// inbox asleep sends the actor one drainInbox; the callers that come before
// the actor takes the queue ride along in the same batch. Each caller then
// waits on a reply channel of its own, pooled with its write.
//
// The inbox outlives a restart of the actor after a panic (see New): the
// new instance drains what the old one had not taken.
type inbox struct {
	mu     sync.Mutex
	queue  []*write
	spare  []*write // the slice handed back by the actor, reused
	awake  bool     // a drainInbox is on its way or being handled
	closed bool

	// calls are the facade's calls waiting for an answer, oldest first,
	// for the deadline sweep (see tick).
	calls    calls
	epoch    uint64        // ticks of sweep so far
	period   time.Duration // between ticks: half the request timeout
	sweep    *time.Timer   // runs tick while calls wait
	sweeping bool          // sweep is armed
}

// expiryEpochs is how many ticks a call waits before the sweep ends it.
// A call is put between two ticks, so it waits more than two periods and
// at most three: between the request timeout and one and a half times it.
const expiryEpochs = 3

// newInbox returns an inbox whose calls time out after timeout, to within
// half of it.
func newInbox(timeout time.Duration) *inbox {
	in := &inbox{period: max(timeout/2, 1)}
	in.sweep = time.AfterFunc(time.Hour, in.tick)
	in.sweep.Stop()
	return in
}

// drainInbox is the one message a batch of facade writes costs: it tells
// the registry actor to take the inbox's queue.
type drainInbox struct{}

// put queues w and reports whether the caller must wake the actor. It
// refuses (false, false) once the inbox is closed.
func (in *inbox) put(w *write) (accepted, wake bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return false, false
	}
	in.queue = append(in.queue, w)
	if w.done != nil {
		w.epoch = in.epoch
		in.calls.push(w)
		if !in.sweeping {
			in.sweeping = true
			in.sweep.Reset(in.period)
		}
	}
	wake = !in.awake
	in.awake = true
	return true, wake
}

// take hands the queued writes to the actor and marks the inbox asleep, so
// the next put wakes the actor again. The actor gives the slice back with
// recycle once it has read it.
func (in *inbox) take() []*write {
	in.mu.Lock()
	defer in.mu.Unlock()
	queued := in.queue
	in.queue, in.spare = in.spare[:0], nil
	in.awake = false
	return queued
}

// recycle returns a slice from take for the next batch.
func (in *inbox) recycle(s []*write) {
	clear(s)
	in.mu.Lock()
	if in.spare == nil {
		in.spare = s[:0]
	}
	in.mu.Unlock()
}

// close refuses every later put. Writes already queued are still taken.
func (in *inbox) close() {
	in.mu.Lock()
	in.closed = true
	in.rest()
	in.mu.Unlock()
}

// rest stops the sweep of a closed inbox once no call waits: nothing arms
// it again, and a stopped registry keeps no timer. in.mu is held.
func (in *inbox) rest() {
	if in.closed && in.calls.head == nil && in.sweeping {
		in.sweeping = false
		in.sweep.Stop()
	}
}

// calls is a list of writes linked through their prev and next.
type calls struct{ head, tail *write }

func (l *calls) push(w *write) {
	w.prev, w.next, w.linked = l.tail, nil, true
	if l.tail == nil {
		l.head = w
	} else {
		l.tail.next = w
	}
	l.tail = w
}

func (l *calls) unlink(w *write) {
	if w.prev == nil {
		l.head = w.next
	} else {
		w.prev.next = w.next
	}
	if w.next == nil {
		l.tail = w.prev
	} else {
		w.next.prev = w.prev
	}
	w.prev, w.next, w.linked = nil, nil, false
}

// tick ends the calls that have waited expiryEpochs ticks: each gets
// ErrTimeout in its reply channel, which nobody else writes once the call
// is unlinked (see claim). The sweep stops while no call waits, so an idle
// registry arms no timer, and a busy one arms one for all its callers
// instead of one per call: a timer per call, armed and stopped, was a
// fifteenth of a busy registry's CPU, with the runtime's timer checks.
func (in *inbox) tick() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.epoch++
	for w := in.calls.head; w != nil && in.epoch-w.epoch >= expiryEpochs; w = in.calls.head {
		in.calls.unlink(w)
		w.done <- ErrTimeout // unlinked only now: nobody has answered it
	}
	if in.calls.head == nil {
		in.sweeping = false
		return
	}
	in.sweep.Reset(in.period)
}

// claim takes the facade's calls among ws off the sweep's list, under one
// lock, and marks each claimed: the actor answers only claimed calls, so a
// call gets one answer, the actor's or the sweep's ErrTimeout. A call the
// sweep has ended stays unclaimed.
func (in *inbox) claim(ws ...*write) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, w := range ws {
		if w.linked {
			in.calls.unlink(w)
			w.claimed = true
		}
	}
	in.rest()
}

// writes recycles facade writes with their reply channel: a busy registry
// answers hundreds of thousands of calls a second, and a fresh channel for
// each was a tenth of a caller's cost.
var writes = sync.Pool{New: func() any { return &write{done: make(chan error, 1)} }}

// newCall returns a pooled write for a facade call.
func newCall() *write { return writes.Get().(*write) }

// wait blocks until the actor answers w or the inbox's sweep ends it (see
// tick): the caller waits on its reply channel alone, since a select on
// the reply and a timer's channel cost a tenth of a writer's CPU. An
// answered write goes back to the pool: neither the actor nor the sweep
// touches it once it is answered. One that timed out may still be in the
// actor's hands, so it is left to the garbage collector.
func (w *write) wait() (answered bool, err error) {
	if err = <-w.done; err == ErrTimeout {
		return false, nil
	}
	done := w.done
	*w = write{done: done}
	writes.Put(w)
	return true, err
}
