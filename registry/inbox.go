package registry

import (
	"errors"
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
	in.mu.Unlock()
}

// writes recycles facade writes with their reply channel and timer: a busy
// registry answers hundreds of thousands of calls a second, and a fresh
// channel and timer for each were a tenth of a caller's cost.
var writes = sync.Pool{New: func() any {
	w := &write{done: make(chan error, 1)}
	w.timer = time.AfterFunc(time.Hour, w.expire)
	w.timer.Stop()
	return w
}}

// newCall returns a pooled write for a facade call.
func newCall() *write { return writes.Get().(*write) }

// errExpired is what a facade call's timer leaves in its reply channel.
var errExpired = errors.New("registry: request timed out")

// expire ends the wait of a write whose request timeout has passed, unless
// its answer came first. The actor's answer is then dropped (see
// pluginsActor.reply): its caller has gone.
func (w *write) expire() {
	select {
	case w.done <- errExpired:
	default:
	}
}

// wait blocks until the actor answers w or timeout passes. The timer is a
// function that leaves errExpired in w's reply channel, so the caller waits
// on that one channel alone: a select on the reply and a timer's channel
// cost a tenth of a writer's CPU, mostly in the runtime's timer locks. An
// answered write goes back to the pool, unless its timer fired meanwhile
// (and so may yet write to its channel); one that timed out may still be
// answered later, so it is left to the garbage collector too.
func (w *write) wait(timeout time.Duration) (answered bool, err error) {
	w.timer.Reset(timeout)
	if err = <-w.done; err == errExpired {
		return false, nil
	}
	if w.timer.Stop() {
		done, timer := w.done, w.timer
		*w = write{done: done, timer: timer}
		writes.Put(w)
	}
	return true, err
}
