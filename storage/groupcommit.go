package storage

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/plugvisor/plugvisor/errclass"
)

// groupCommit writes Apply calls that arrive together in one bbolt
// transaction, so that they share one fsync: durable throughput grows with the
// number of concurrent writers while a lone writer pays no added delay but
// one yield of the processor.
//
// There is no goroutine of its own. The first caller to find no commit in
// progress leads: it takes every pending request, commits them, and then
// hands the lead to the oldest request that arrived meanwhile (or gives it up
// when none did). Requests in one commit are applied in arrival order.
type groupCommit struct {
	db   *bolt.DB
	path string // for errors

	mu      sync.Mutex
	leading bool             // a commit is in progress; newcomers wait in pending
	pending []*commitRequest // in arrival order

	commits atomic.Int64 // transactions committed, for tests and benchmarks
	// busy is the time spent in transactions (writing and syncing), for
	// benchmarks: over a run's wall time, the share the store was busy.
	busy atomic.Int64
}

// commitRequest is one Apply call waiting for its commit.
type commitRequest struct {
	bucket []byte
	ops    []Op
	// done receives the result of the commit, or errLead when this request's
	// goroutine is to lead the next commit.
	done chan error
}

// errLead tells a waiting request to lead the next commit. It never leaves
// this file: its class is a formality.
var errLead = errclass.New(errclass.Store, "lead the next group commit")

// apply writes ops to bucket as part of a group commit and returns once the
// commit that held them is durable (or failed).
func (g *groupCommit) apply(bucket []byte, ops []Op) error {
	r := &commitRequest{bucket: bucket, ops: ops, done: make(chan error, 1)}
	g.mu.Lock()
	g.pending = append(g.pending, r)
	if g.leading {
		g.mu.Unlock()
		if err := <-r.done; err != errLead {
			return err
		}
	} else {
		g.leading = true
		g.mu.Unlock()
	}
	g.lead()
	return <-r.done
}

// lead commits everything pending, then passes the lead on. It first
// yields the processor once, so that goroutines already runnable (writers
// whose RPC or commit just returned, most of them about to write again)
// can join this commit rather than wait for the next one: a commit is two
// fdatasyncs, a yield is nothing when none is runnable and one turn of
// the run queue when some are.
func (g *groupCommit) lead() {
	runtime.Gosched()
	g.mu.Lock()
	group := g.pending
	g.pending = nil
	g.mu.Unlock()

	g.commit(group)

	g.mu.Lock()
	if len(g.pending) == 0 {
		g.leading = false
		g.mu.Unlock()
		return
	}
	next := g.pending[0]
	g.mu.Unlock()
	next.done <- errLead
}

// commit writes group in one transaction and sends each request its result.
// A request whose ops fail (bbolt refused them) gets that error and the rest
// are committed again without it, so one bad batch never fails another
// owner's.
func (g *groupCommit) commit(group []*commitRequest) {
	for len(group) > 0 {
		failed := -1
		start := time.Now()
		err := recoverPanic(func() error {
			return g.db.Update(func(tx *bolt.Tx) error {
				for i, r := range group {
					if err := writeOps(tx, r.bucket, r.ops); err != nil {
						failed = i
						return err
					}
				}
				return nil
			})
		})
		g.busy.Add(int64(time.Since(start)))
		if failed >= 0 && !errors.Is(err, errPanicked) {
			group[failed].done <- err
			group = slices.Delete(group, failed, failed+1)
			continue
		}
		switch {
		case err == nil:
			g.commits.Add(1)
		case errors.Is(err, errPanicked):
			err = corrupt(g.path, err)
		case errors.Is(err, berrors.ErrDatabaseNotOpen):
			err = ErrClosed
		default:
			err = fmt.Errorf("commit to %s: %w", g.path, err)
		}
		for _, r := range group {
			r.done <- err
		}
		return
	}
}

// writeOps applies ops to bucket (creating it) inside tx, sealing each value
// with its checksum.
func writeOps(tx *bolt.Tx, bucket []byte, ops []Op) error {
	b, err := tx.CreateBucketIfNotExists(bucket)
	if err != nil {
		return fmt.Errorf("bucket %q: %w", bucket, err)
	}
	for i, op := range ops {
		if op.Value == nil {
			err = b.Delete(op.Key)
		} else {
			err = b.Put(op.Key, seal(bucket, op.Key, op.Value))
		}
		if err != nil {
			return fmt.Errorf("bucket %q, op %d: %w", bucket, i, err)
		}
	}
	return nil
}

// closedOr turns bbolt's "database not open" into ErrClosed and returns any
// other error unchanged.
func closedOr(err error) error {
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return ErrClosed
	}
	return err
}
