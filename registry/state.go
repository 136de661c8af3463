package registry

import (
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/plugvisor/plugvisor/messages"
)

// allocation is one registered copy of a plugin, with its PluginInfo and
// ConnectionInfo inline: one heap object of 224 bytes (a Go size class),
// where a pointer to them and a second sequence made it 240. It is
// immutable: a change makes a new allocation with the same order.
type allocation struct {
	plugin messages.PluginInfo
	// conn is plugin.Connection's when the plugin has a connection
	// (copyInto).
	conn messages.ConnectionInfo
	// ord is the order (see order), with updatedBit set on an
	// allocation made as an updatedAllocation.
	ord uint64
}

// updatedAllocation is an allocation whose changed sequence differs from
// its order: one that an update replaced. Most allocations are never
// updated, and keep no second sequence.
type updatedAllocation struct {
	allocation
	changed uint64
}

// updatedBit marks, in allocation.ord, an allocation that is the first
// field of an updatedAllocation. Every allocation with it set came from
// newAllocation: sequences never reach it, as no sequence beyond
// maxSequence is loaded (load) or handed out (pluginsActor.apply), and
// search keys (borrowKey) take at most maxSequence too.
const updatedBit = 1 << 63

// maxSequence is the last sequence number, and the highest order.
const maxSequence = updatedBit - 1

// newAllocation copies p into a new allocation with order and changed.
func newAllocation(p *messages.PluginInfo, order, changed uint64) *allocation {
	var a *allocation
	if changed == order {
		a = &allocation{ord: order}
	} else {
		u := &updatedAllocation{changed: changed}
		u.ord = order | updatedBit
		a = &u.allocation
	}
	copyInto(a, p)
	return a
}

// info is the allocation's PluginInfo, as readers and events hand it out.
func (a *allocation) info() *messages.PluginInfo { return &a.plugin }

// order is the registration's place in time: the highest order of a name
// is current. It is persisted, so a restart keeps it.
func (a *allocation) order() uint64 { return a.ord &^ updatedBit }

// changed is the sequence of the last event that changed the allocation:
// its order, or a later update's. Replay reports it, and it is persisted
// too.
func (a *allocation) changed() uint64 {
	if a.ord&updatedBit == 0 {
		return a.ord
	}
	// a is the first field of an updatedAllocation (newAllocation), so
	// the pointer is that object's too.
	return (*updatedAllocation)(unsafe.Pointer(a)).changed
}

// pluginTable holds the allocations of one plugin type: up to smallMax in
// one sorted slice (see smallSet), and past that in two B-trees (allocTree):
// by (name, alloc) for lookups, and by (name, newest first), whose first
// item of a name is that name's current allocation. The second holds only
// the names with two allocations or more: a name with one (the common case)
// is its own current, found in the first tree, and costs one tree's item
// instead of two (about 10 bytes of a plugin's heap). Every change of a
// large table costs O(log n) whatever the number of older allocations of a
// name, and clone is O(1) either way: the trees share nodes copy-on-write
// and the slice is copied on the first change after a clone, so a clone
// handed to readers never changes under them.
type pluginTable struct {
	small smallSet // nil once allocs and newest hold the table
	// owned is set on a working table that has copied small since its
	// last clone, and so may change it in place.
	owned bool
	// dirty is set on a working table changed since the last cut
	// (pluginsActor.changed).
	dirty  bool
	allocs *allocTree
	newest *allocTree

	// frozen caches list() and an index of it by name once the table is
	// frozen in a snapshot; the actor's working tables never read it.
	frozen atomic.Pointer[currentIndex]
}

// currentIndex is the current allocation of each name of a frozen table,
// in name order and by name.
type currentIndex struct {
	list   []*messages.PluginInfo
	byName map[string]*messages.PluginInfo
}

func newPluginTable() *pluginTable { return &pluginTable{} }

// newTrees returns the two empty trees of a large table: by (name, alloc)
// and by (name, newest first).
func newTrees() (allocs, newest *allocTree) {
	return newAllocTree(compareAlloc), newAllocTree(compareNewest)
}

// clone returns a copy that shares nodes until either side changes.
func (t *pluginTable) clone() *pluginTable {
	if t.allocs == nil {
		if t.owned {
			t.owned = false // a table frozen in a snapshot is never written
		}
		return &pluginTable{small: t.small}
	}
	return &pluginTable{allocs: t.allocs.Clone(), newest: t.newest.Clone()}
}

// len is how many allocations the table holds.
func (t *pluginTable) len() int {
	if t.allocs == nil {
		return len(t.small)
	}
	return t.allocs.Len()
}

func probe(name, alloc string) *allocation {
	a := &allocation{}
	a.plugin.Name, a.plugin.AllocId = name, alloc
	return a
}

// probes recycles the search keys of lookups: readers look plugins up
// from many goroutines at once, and a fresh key per lookup was most of the
// cost of DispensePlugin.
var probes = sync.Pool{New: func() any { return probe("", "") }}

// lookup finds the item of tree with name and alloc.
func lookup(tree *allocTree, name, alloc string) (*allocation, bool) {
	key := borrowKey(name, alloc, 0)
	defer returnKey(key)
	return tree.Get(key)
}

// borrowKey takes a search key from probes; returnKey gives it back.
// order is at most maxSequence (the newest first of a name takes
// maxSequence), so that a key, like every allocation not made by
// newAllocation, has no updatedBit.
func borrowKey(name, alloc string, order uint64) *allocation {
	key := probes.Get().(*allocation)
	key.plugin.Name, key.plugin.AllocId, key.ord = name, alloc, order
	return key
}

func returnKey(key *allocation) {
	key.plugin.Name, key.plugin.AllocId, key.ord = "", "", 0
	probes.Put(key)
}

func (t *pluginTable) get(name, alloc string) (*allocation, bool) {
	if t.allocs == nil {
		return t.small.get(name, alloc)
	}
	return lookup(t.allocs, name, alloc)
}

// find returns the current allocation of name and its allocation alloc,
// each nil when there is none: for a small table, with one search.
func (t *pluginTable) find(name, alloc string) (current, found *allocation) {
	if t.allocs == nil {
		from, to := t.small.run(name)
		if from == to {
			return nil, nil
		}
		for _, a := range t.small[from:to] {
			if a.info().GetAllocId() == alloc {
				found = a
				break
			}
		}
		return t.small[from], found
	}
	current, _ = t.currentOf(name)
	found, _ = t.get(name, alloc)
	return current, found
}

// sole returns the first allocation of name in a large table's allocs,
// nil when it has none, and whether name has more than that one.
func (t *pluginTable) sole(name string) (first *allocation, more bool) {
	key := borrowKey(name, "", 0)
	defer returnKey(key)
	t.allocs.AscendGreaterOrEqual(key, func(a *allocation) bool {
		if a.info().GetName() != name {
			return false
		}
		if first != nil {
			more = true
			return false
		}
		first = a
		return true
	})
	return first, more
}

// topOf returns the current allocation of name from a large table's
// newest-first tree, nil when name has fewer than two allocations.
func (t *pluginTable) topOf(name string) *allocation {
	key := borrowKey(name, "", maxSequence)
	defer returnKey(key)
	top := t.first(key)
	if top == nil || top.info().GetName() != name {
		return nil
	}
	return top
}

// currentOf returns the current allocation of name: its newest.
func (t *pluginTable) currentOf(name string) (*allocation, bool) {
	if t.allocs == nil {
		return t.small.current(name)
	}
	if top := t.topOf(name); top != nil {
		return top, true
	}
	first, _ := t.sole(name)
	return first, first != nil
}

// first returns the first allocation of the newest-first tree at or after
// key, or nil.
func (t *pluginTable) first(key *allocation) *allocation {
	var top *allocation
	t.newest.AscendGreaterOrEqual(key, func(a *allocation) bool {
		top = a
		return false
	})
	return top
}

// eachCurrent calls fn with the current allocation of each name, in name
// order. It walks the (name, alloc) tree in order; a name with one
// allocation is its own current, and for a name with more it takes the
// newest from the newest-first tree and skips the rest of the name with
// one search: one step per name, however many older allocations each has.
func (t *pluginTable) eachCurrent(fn func(*allocation)) {
	if t.allocs == nil {
		t.small.each(fn)
		return
	}
	key := borrowKey("", "", 0)
	defer returnKey(key)
	for walking := true; walking; {
		walking = false
		var pending *allocation // the first of a name, not yet told
		t.allocs.AscendGreaterOrEqual(key, func(a *allocation) bool {
			name := a.info().GetName()
			if pending != nil && name == pending.info().GetName() {
				fn(t.topOf(name))
				pending = nil
				// The smallest name after name's: names hold no NUL.
				key.plugin.Name, walking = name+"\x00", true
				return false
			}
			if pending != nil {
				fn(pending)
			}
			pending = a
			return true
		})
		if pending != nil {
			fn(pending)
		}
	}
}

// put adds a or replaces the allocation with the same name and alloc ID.
// A replacement must keep its order.
func (t *pluginTable) put(a *allocation) {
	if t.allocs == nil {
		t.putSmall(a, true)
		return
	}
	if _, ok := lookup(t.allocs, a.info().GetName(), a.info().GetAllocId()); !ok {
		t.add(a)
		return
	}
	t.allocs.ReplaceOrInsert(a)
	if t.topOf(a.info().GetName()) != nil {
		t.newest.ReplaceOrInsert(a)
	}
}

// add is put for an allocation the table does not hold.
func (t *pluginTable) add(a *allocation) {
	if t.allocs == nil {
		t.putSmall(a, false)
		return
	}
	if t.topOf(a.info().GetName()) != nil {
		t.newest.ReplaceOrInsert(a)
	} else if first, _ := t.sole(a.info().GetName()); first != nil {
		t.newest.ReplaceOrInsert(first)
		t.newest.ReplaceOrInsert(a)
	}
	t.allocs.ReplaceOrInsert(a)
}

// remove deletes a, which the table holds; the next newest allocation of
// its name, if any, becomes current, and remove returns it.
func (t *pluginTable) remove(a *allocation) (now *allocation, ok bool) {
	if t.allocs == nil {
		return t.removeSmall(a)
	}
	t.allocs.Delete(a)
	if _, was := t.newest.Delete(a); was {
		if first, more := t.sole(a.info().GetName()); first != nil && !more {
			t.newest.Delete(first) // one left: it needs no newest-first item
		}
	}
	return t.currentOf(a.info().GetName())
}

// list returns the current allocation of each name, sorted by name.
func (t *pluginTable) list() []*messages.PluginInfo {
	out := []*messages.PluginInfo{}
	t.eachCurrent(func(a *allocation) { out = append(out, a.info()) })
	return out
}

// index returns the currentIndex of a table frozen in a snapshot: the
// first reader walks the tree and keeps it, later readers share it. A
// lookup by name is then one map read instead of a B-tree search, which
// is what DispensePlugin costs.
func (t *pluginTable) index() *currentIndex {
	cached := t.frozen.Load()
	if cached == nil {
		l := t.list()
		cached = &currentIndex{list: l, byName: make(map[string]*messages.PluginInfo, len(l))}
		for _, p := range l {
			cached.byName[p.GetName()] = p
		}
		t.frozen.Store(cached)
	}
	return cached
}

// frozenList is list() for a table frozen in a snapshot. Each caller gets
// a slice of its own.
func (t *pluginTable) frozenList() []*messages.PluginInfo {
	return slices.Clone(t.index().list)
}

// Snapshot is an immutable view of the registry's durable state, published
// by the registry actor after every committed batch of writes. Readers use
// it without going through the actor's mailbox: a read never waits for a
// write and a write never waits for a read. The PluginInfo values it returns
// are shared and must be treated as read-only (proto.Clone one to change it).
type Snapshot struct {
	tables   typeTables
	sequence uint64
	// next is closed when a newer snapshot replaces this one. It is made
	// by the first reader that asks for it (most snapshots are replaced
	// before anyone waits on one): whichever of that reader and the
	// publisher comes second closes it, once.
	next       atomic.Pointer[chan struct{}]
	superseded atomic.Bool
	closeNext  sync.Once
}

func newSnapshot(tables typeTables, sequence uint64) *Snapshot {
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
		out = append(out, t.ptype)
	}
	return out
}

// List returns the current allocation of every plugin of ptype, sorted by
// name. An empty ptype lists every type, sorted by type then name.
func (s *Snapshot) List(ptype string) []*messages.PluginInfo {
	if ptype != "" {
		if t, ok := s.tables.get(ptype); ok {
			return t.frozenList()
		}
		return []*messages.PluginInfo{}
	}
	var out []*messages.PluginInfo
	for _, t := range s.tables {
		out = append(out, t.table.frozenList()...)
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
		if t, ok := s.tables.get(name); ok {
			t.eachCurrent(func(a *allocation) {
				out = append(out, &messages.PluginRegistered{Plugin: a.info(), Sequence: a.changed()})
			})
		}
	}
	return out
}

// Current returns the current allocation of the plugin (ptype, name).
func (s *Snapshot) Current(ptype, name string) (*messages.PluginInfo, bool) {
	if t, ok := s.tables.get(ptype); ok {
		p, ok := t.index().byName[name]
		return p, ok
	}
	return nil, false
}

// ForAlloc returns the allocation allocID of the plugin (ptype, name),
// whether it is current or not.
func (s *Snapshot) ForAlloc(ptype, name, allocID string) (*messages.PluginInfo, bool) {
	if t, ok := s.tables.get(ptype); ok {
		if a, ok := t.get(name, allocID); ok {
			return a.info(), true
		}
	}
	return nil, false
}

// Allocations returns every allocation of the plugin (ptype, name), newest
// (current) first.
func (s *Snapshot) Allocations(ptype, name string) []*messages.PluginInfo {
	var out []*messages.PluginInfo
	if t, ok := s.tables.get(ptype); ok && t.allocs == nil {
		from, to := t.small.run(name)
		for _, a := range t.small[from:to] {
			out = append(out, a.info())
		}
	} else if ok && t.topOf(name) == nil {
		if first, _ := t.sole(name); first != nil {
			out = append(out, first.info())
		}
	} else if ok {
		key := borrowKey(name, "", maxSequence)
		defer returnKey(key)
		t.newest.AscendGreaterOrEqual(key,
			func(a *allocation) bool {
				if a.info().GetName() != name {
					return false
				}
				out = append(out, a.info())
				return true
			})
	}
	return out
}
