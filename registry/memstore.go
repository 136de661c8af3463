package registry

import (
	"sync"

	"github.com/plugvisor/plugvisor/registry/internal/table"
)

// MemoryStore keeps a registry's state in memory, as the Go values the
// registry holds: no record is encoded and no copy is made. A write is
// durable in it as soon as the registry actor has applied it, so the actor
// commits each batch on its own goroutine, with no store goroutine to hand
// it to. Nothing survives the process; a registry made again with the same
// MemoryStore (after Shutdown) starts from the state the first one left.
// Give it to Config.Memory, instead of a Bucket, where nothing needs to
// survive a restart of the process (tests, benchmarks, an embedder that
// keeps its own state). One registry at a time may use a MemoryStore.
type MemoryStore struct {
	mu    sync.Mutex
	state *Snapshot // the last committed state; nil while empty
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore { return &MemoryStore{} }

// keep records s, the state once a batch is committed. s is immutable.
func (m *MemoryStore) keep(s *Snapshot) {
	m.mu.Lock()
	m.state = s
	m.mu.Unlock()
}

// restore returns the tables and sequence kept last, the tables cloned
// (in O(1) each) so that the new registry's working state never changes
// the kept one.
func (m *MemoryStore) restore() (*table.Working, uint64) {
	m.mu.Lock()
	s := m.state
	m.mu.Unlock()
	if s == nil {
		return table.NewWorking(), 0
	}
	return s.tables.Working(), s.sequence
}
