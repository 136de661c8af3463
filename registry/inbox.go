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
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &write{done: make(chan error, 1), timer: t}
}}

// newCall returns a pooled write for a facade call.
func newCall() *write { return writes.Get().(*write) }

// wait blocks until the actor answers w or timeout passes. An answered
// write goes back to the pool; one that timed out may still be answered
// later, so it is left to the garbage collector.
func (w *write) wait(timeout time.Duration) (answered bool, err error) {
	w.timer.Reset(timeout)
	select {
	case err := <-w.done:
		w.timer.Stop()
		done, timer := w.done, w.timer
		*w = write{done: done, timer: timer}
		writes.Put(w)
		return true, err
	case <-w.timer.C:
		return false, nil
	}
}
