package registry

import (
	"sync"
	"sync/atomic"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry/internal/table"
)

// Snapshot is an immutable view of the registry's durable state, published
// by the registry actor after every committed batch of writes. Readers use
// it without going through the actor's mailbox: a read never waits for a
// write and a write never waits for a read. The PluginInfo values it returns
// are shared and must be treated as read-only (proto.Clone one to change it).
type Snapshot struct {
	tables   table.Types
	sequence uint64
	// next is closed when a newer snapshot replaces this one. It is made
	// by the first reader that asks for it (most snapshots are replaced
	// before anyone waits on one): whichever of that reader and the
	// publisher comes second closes it, once.
	next       atomic.Pointer[chan struct{}]
	superseded atomic.Bool
	closeNext  sync.Once
}

func newSnapshot(tables table.Types, sequence uint64) *Snapshot {
	return &Snapshot{tables: tables, sequence: sequence}
}

// Sequence is the sequence number of the last event this snapshot includes.
func (s *Snapshot) Sequence() uint64 { return s.sequence }

// Changed is closed once a newer snapshot has been published.
func (s *Snapshot) Changed() <-chan struct{} {
	if next := s.next.Load(); next != nil {
		return *next
	}
	ch := make(chan struct{})
	if !s.next.CompareAndSwap(nil, &ch) {
		return *s.next.Load()
	}
	if s.superseded.Load() {
		s.close()
	}
	return ch
}

// supersede marks s replaced by a newer snapshot, closing Changed.
func (s *Snapshot) supersede() {
	s.superseded.Store(true)
	if s.next.Load() != nil {
		s.close()
	}
}

func (s *Snapshot) close() { s.closeNext.Do(func() { close(*s.next.Load()) }) }

// Types lists the plugin types that have ever had a registration, sorted.
func (s *Snapshot) Types() []string {
	out := make([]string, 0, len(s.tables))
	for _, t := range s.tables {
		out = append(out, t.Type)
	}
	return out
}

// List returns the current allocation of every plugin of ptype, sorted by
// name. An empty ptype lists every type, sorted by type then name.
func (s *Snapshot) List(ptype string) []*messages.PluginInfo {
	if ptype != "" {
		if t, ok := s.tables.Get(ptype); ok {
			return t.Plugins()
		}
		return []*messages.PluginInfo{}
	}
	var out []*messages.PluginInfo
	for _, t := range s.tables {
		out = append(out, t.Table.Plugins()...)
	}
	return out
}

// replay returns the current allocation of every plugin of ptype ("" for
// every type) as PluginRegistered events, each carrying the sequence of
// the last event that changed it.
func (s *Snapshot) replay(ptype string) []Event {
	types := []string{ptype}
	if ptype == "" {
		types = s.Types()
	}
	var out []Event
	for _, name := range types {
		if t, ok := s.tables.Get(name); ok {
			t.EachCurrent(func(a *table.Allocation) {
				out = append(out, &messages.PluginRegistered{Plugin: a.Info(), Sequence: a.Changed()})
			})
		}
	}
	return out
}

// Current returns the current allocation of the plugin (ptype, name).
func (s *Snapshot) Current(ptype, name string) (*messages.PluginInfo, bool) {
	if t, ok := s.tables.Get(ptype); ok {
		return t.Current(name)
	}
	return nil, false
}

// ForAlloc returns the allocation allocID of the plugin (ptype, name),
// whether it is current or not.
func (s *Snapshot) ForAlloc(ptype, name, allocID string) (*messages.PluginInfo, bool) {
	if t, ok := s.tables.Get(ptype); ok {
		if a, ok := t.Get(name, allocID); ok {
			return a.Info(), true
		}
	}
	return nil, false
}

// Allocations returns every allocation of the plugin (ptype, name), newest
// (current) first.
func (s *Snapshot) Allocations(ptype, name string) []*messages.PluginInfo {
	if t, ok := s.tables.Get(ptype); ok {
		return t.Allocations(name)
	}
	return nil
}
