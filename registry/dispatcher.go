package registry

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/plugvisor/plugvisor/storage"
)

// mailboxThroughput is how many messages the registry actor handles in a
// row before it yields, as with protoactor's default dispatcher.
const mailboxThroughput = 300

// ownGoroutine is a protoactor Dispatcher that runs one actor's mailbox on
// a goroutine that lives as long as the actor. protoactor's default starts
// a new goroutine each time a mailbox wakes up; the registry's handlers run
// deep call stacks, so every fresh goroutine grew (copied) its stack again,
// which cost about a fifth of the CPU of a write-heavy benchmark
// (see BENCHMARKS.md). The long-lived goroutine keeps its grown stack.
//
// The actor calls close when it stops; the goroutine then finishes the
// work already handed to it and returns. Work scheduled after close runs on
// a goroutine of its own, as with the default dispatcher.
type ownGoroutine struct {
	work chan func()
	stop chan struct{}

	mu     sync.Mutex // orders Schedule against close
	closed bool
}

var _ actor.Dispatcher = (*ownGoroutine)(nil)

func newOwnGoroutine() *ownGoroutine {
	// A mailbox schedules itself again only once its previous run has
	// marked it idle: one run in progress and one waiting fit.
	d := &ownGoroutine{work: make(chan func(), 2), stop: make(chan struct{})}
	go d.run()
	return d
}

func (d *ownGoroutine) run() {
	for {
		select {
		case fn := <-d.work:
			fn()
		case <-d.stop:
			for {
				select {
				case fn := <-d.work:
					fn()
				default:
					return
				}
			}
		}
	}
}

// Schedule runs fn on the actor's goroutine, or on a new one once the
// dispatcher is closed.
func (d *ownGoroutine) Schedule(fn func()) {
	d.mu.Lock()
	if !d.closed {
		select {
		case d.work <- fn:
			d.mu.Unlock()
			return
		default: // cannot happen (see newOwnGoroutine); never block a sender
		}
	}
	d.mu.Unlock()
	go fn()
}

// Throughput is how many messages a mailbox run handles before yielding.
func (d *ownGoroutine) Throughput() int { return mailboxThroughput }

// close lets the goroutine return once it has run the work it was given.
func (d *ownGoroutine) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closed {
		d.closed = true
		close(d.stop)
	}
}

// storeWriter writes the registry actor's batches to its bucket, one at a
// time, on a goroutine that lives as long as the actor, and tells the actor
// each result with a batchWritten. A goroutine per batch grew its stack
// again for every transaction (bbolt's call stacks are deep); this one
// keeps it. The actor hands it at most one batch at a time.
type storeWriter struct {
	batches chan storeBatch
	once    sync.Once
}

type storeBatch struct {
	ops    []storage.Op
	root   *actor.RootContext
	notify *actor.PID
}

func newStoreWriter(bucket storage.Bucket) *storeWriter {
	w := &storeWriter{batches: make(chan storeBatch, 1)}
	go func() {
		for b := range w.batches {
			b.root.Send(b.notify, &batchWritten{err: bucket.Apply(b.ops)})
		}
	}()
	return w
}

// write hands ops to the goroutine; batchWritten comes back to notify.
func (w *storeWriter) write(root *actor.RootContext, notify *actor.PID, ops []storage.Op) {
	w.batches <- storeBatch{ops: ops, root: root, notify: notify}
}

// close lets the goroutine return once it has written what it was given.
// A nil storeWriter (a registry in memory) has nothing to close.
func (w *storeWriter) close() {
	if w != nil {
		w.once.Do(func() { close(w.batches) })
	}
}
