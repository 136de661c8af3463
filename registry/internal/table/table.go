package table

import (
	"slices"
	"strings"

	"github.com/plugvisor/plugvisor/messages"
)

// recentMax is how many names a large table keeps changed on the side
// before it merges them into its trees.
const recentMax = 32

// recentAllocsMax is the most allocations a name kept on the side holds.
// A change of a name with more goes to the trees at once, which cost
// O(log n) whatever a name's number of allocations.
const recentAllocsMax = 8

// Table holds the allocations of one plugin type: a store, and, once the
// store is large, the names changed since their last merge into it.
//
// A change of a large store copies the path of B-tree nodes it touches
// the first time after a clone, and a snapshot clones every table a batch
// changed: about 2.4 KB a write at 100,000 plugins, most of what a write
// cost there. So a large table keeps each changed name's allocations on
// the side instead (recent: a name's whole list, newest first, which
// stands for all the store holds of that name). A write then copies the
// slice of recent names and makes one entry, and the store changes only
// once more than recentMax names have gathered: a name changed twice, or
// changed and changed back (a short-lived allocation), touches the trees
// once or not at all. A clone shares the store until the working table
// next writes it (writable), so a batch that changed only recent names
// clones no store either.
//
// A small store is written through: copying its slice is as cheap.
type Table struct {
	base *store
	// recent is sorted by name. Its entries never change, and neither does
	// the slice while recentOwned is unset: a clone shares both.
	recent      []*recentName
	recentOwned bool
	// baseShared is set while base is shared with a clone, which must
	// not see it change: the first write to it clones it (writable).
	// Most batches of a large table change only recent, and a snapshot
	// then costs no clone of the store.
	baseShared bool
	// extra is Len less base's: the allocations recent adds less the ones
	// it drops.
	extra int
	// dirty is set on a working table changed since the last cut
	// (Working.Changed).
	dirty bool
	// recentMax is recentMax, or less in tests that need merges often.
	recentMax int
}

// recentName is the allocations of a recently changed name.
type recentName struct {
	name string
	// allocs are newest (current) first; none when the name has none left.
	allocs []*Allocation
	// stored is what the store holds of the name (newest first), which
	// merge changes into allocs. The store changes a name only in a merge,
	// so it holds until then.
	stored []*Allocation
}

// New returns an empty table.
func New() *Table { return &Table{base: &store{}, recentMax: recentMax} }

// Clone returns a copy that shares what either side holds until it
// changes it.
func (t *Table) Clone() *Table {
	// A table frozen in a snapshot has these set already, and is never
	// written.
	if t.recentOwned {
		t.recentOwned = false
	}
	if !t.baseShared {
		t.baseShared = true
	}
	return &Table{base: t.base, baseShared: true, recent: t.recent, extra: t.extra, recentMax: t.recentMax}
}

// writable returns the store for a write, cloned first if a clone shares
// it. The clone marks the shared store's nodes as no longer the writer's;
// readers of the clones that share it never read those marks.
func (t *Table) writable() *store {
	if t.baseShared {
		t.base, t.baseShared = t.base.Clone(), false
	}
	return t.base
}

// Len is how many allocations the table holds.
func (t *Table) Len() int { return t.base.Len() + t.extra }

// recentOf returns the recent entry of name, if it has one, and where it
// is or would go.
func (t *Table) recentOf(name string) (int, *recentName) {
	i, ok := slices.BinarySearchFunc(t.recent, name, func(r *recentName, name string) int {
		return strings.Compare(r.name, name)
	})
	if !ok {
		return i, nil
	}
	return i, t.recent[i]
}

// Get returns the allocation alloc of name.
func (t *Table) Get(name, alloc string) (*Allocation, bool) {
	if _, r := t.recentOf(name); r != nil {
		_, a := r.find(alloc)
		return a, a != nil
	}
	return t.base.Get(name, alloc)
}

// Find returns the current allocation of name and its allocation alloc,
// each nil when there is none.
func (t *Table) Find(name, alloc string) (current, found *Allocation) {
	if _, r := t.recentOf(name); r != nil {
		_, found = r.find(alloc)
		return r.current(), found
	}
	return t.base.Find(name, alloc)
}

// currentOf returns the current allocation of name: its newest.
func (t *Table) currentOf(name string) (*Allocation, bool) {
	if _, r := t.recentOf(name); r != nil {
		a := r.current()
		return a, a != nil
	}
	return t.base.currentOf(name)
}

// EachCurrent calls fn with the current allocation of each name, in name
// order: the store's, with the recent names' in their places.
func (t *Table) EachCurrent(fn func(*Allocation)) {
	i := 0
	// upTo calls fn with the recent names before name (all of them when
	// name is ""), and reports whether the next one is name.
	upTo := func(name string) bool {
		for ; i < len(t.recent) && (name == "" || t.recent[i].name < name); i++ {
			if a := t.recent[i].current(); a != nil {
				fn(a)
			}
		}
		return name != "" && i < len(t.recent) && t.recent[i].name == name
	}
	t.base.EachCurrent(func(a *Allocation) {
		if upTo(a.plugin.Name) {
			if now := t.recent[i].current(); now != nil {
				fn(now)
			}
			i++
			return
		}
		fn(a)
	})
	upTo("")
}

// Plugins returns the current allocation of each name, sorted by name, in
// a slice of the caller's own. Nothing is kept between calls: a read after
// a write costs what any read does.
func (t *Table) Plugins() []*messages.PluginInfo {
	out := make([]*messages.PluginInfo, 0, t.Len())
	t.EachCurrent(func(a *Allocation) { out = append(out, a.Info()) })
	return out
}

// Current returns the current allocation of name.
func (t *Table) Current(name string) (*messages.PluginInfo, bool) {
	if a, ok := t.currentOf(name); ok {
		return a.Info(), true
	}
	return nil, false
}

// Allocations returns every allocation of name, newest (current) first.
func (t *Table) Allocations(name string) []*messages.PluginInfo {
	var allocs []*Allocation
	if _, r := t.recentOf(name); r != nil {
		allocs = r.allocs
	} else {
		allocs, _ = t.base.allocationsUpTo(name, -1)
	}
	var out []*messages.PluginInfo
	for _, a := range allocs {
		out = append(out, a.Info())
	}
	return out
}

// Put adds a or replaces the allocation with the same name and alloc ID.
// A replacement must keep its order.
func (t *Table) Put(a *Allocation) {
	i, r, ok := t.change(a.plugin.Name)
	if !ok {
		t.writable().Put(a)
		return
	}
	if j, old := r.find(a.plugin.AllocId); old != nil {
		r.allocs[j] = a
	} else {
		t.extra++ // before keep, which may merge
		r.allocs = inserted(r.allocs, a)
	}
	t.keep(i, r)
}

// Add is Put for an allocation the table does not hold.
func (t *Table) Add(a *Allocation) {
	i, r, ok := t.change(a.plugin.Name)
	if !ok {
		t.writable().Add(a)
		return
	}
	t.extra++ // before keep, which may merge
	r.allocs = inserted(r.allocs, a)
	t.keep(i, r)
}

// Remove deletes a, which the table holds; the next newest allocation of
// its name, if any, becomes current, and Remove returns it.
func (t *Table) Remove(a *Allocation) (now *Allocation, ok bool) {
	i, r, ok := t.change(a.plugin.Name)
	if !ok {
		return t.writable().Remove(a)
	}
	if j, old := r.find(a.plugin.AllocId); old != nil {
		r.allocs = slices.Delete(r.allocs, j, j+1)
		t.extra--
	}
	t.keep(i, r)
	now = r.current()
	return now, now != nil
}

// change returns where name's recent entry is or goes, and a new entry
// for it to change: a copy of the allocations the table holds of name,
// and what the store holds of it. ok is false when the change goes to the
// store at once instead: while the store is small, or when it holds more
// than recentAllocsMax allocations of name (which then has no recent
// entry).
func (t *Table) change(name string) (i int, next *recentName, ok bool) {
	if t.base.allocs == nil {
		return 0, nil, false
	}
	i, r := t.recentOf(name)
	if r != nil {
		return i, &recentName{name: name, allocs: slices.Clone(r.allocs), stored: r.stored}, true
	}
	stored, ok := t.base.allocationsUpTo(name, recentAllocsMax)
	if !ok {
		return i, nil, false
	}
	allocs := make([]*Allocation, len(stored), len(stored)+1)
	copy(allocs, stored)
	return i, &recentName{name: name, allocs: allocs, stored: stored}, true
}

// keep makes r its name's recent entry, at i, and merges the recent names
// into the store once there are more than recentMax.
func (t *Table) keep(i int, r *recentName) {
	if !t.recentOwned {
		t.recent = slices.Clone(t.recent)
		t.recentOwned = true
	}
	if i < len(t.recent) && t.recent[i].name == r.name {
		t.recent[i] = r
	} else {
		t.recent = slices.Insert(t.recent, i, r)
	}
	if len(t.recent) > t.recentMax || len(r.allocs) > recentAllocsMax {
		t.merge()
	}
}

// merge writes the recent names into the store: each allocation of a
// name the store holds and its entry no longer does is removed, each one
// it holds otherwise is put. The entry says what the store holds of its
// name, so a name its entry leaves as the store has it costs nothing: a
// search at merge time, 32 names later, was a cold one at 100,000
// plugins.
func (t *Table) merge() {
	for _, r := range t.recent {
		for _, old := range r.stored {
			if _, a := r.find(old.plugin.AllocId); a == nil {
				t.writable().Remove(old)
			}
		}
		for _, a := range r.allocs {
			switch _, old := find(r.stored, a.plugin.AllocId); {
			case old == nil:
				t.writable().Add(a)
			case old != a:
				t.writable().Put(a)
			}
		}
	}
	t.recent, t.recentOwned, t.extra = nil, false, 0
}

// current is the name's current allocation, nil when it has none.
func (r *recentName) current() *Allocation {
	if len(r.allocs) == 0 {
		return nil
	}
	return r.allocs[0]
}

// find returns the allocation alloc of the name and its index.
func (r *recentName) find(alloc string) (int, *Allocation) { return find(r.allocs, alloc) }

// find returns the allocation of allocs with alloc ID alloc and its index,
// or nil.
func find(allocs []*Allocation, alloc string) (int, *Allocation) {
	for i, a := range allocs {
		if a.plugin.AllocId == alloc {
			return i, a
		}
	}
	return -1, nil
}

// inserted returns allocs, newest first, with a in its place.
func inserted(allocs []*Allocation, a *Allocation) []*Allocation {
	i, _ := slices.BinarySearchFunc(allocs, a, compareNewest)
	return slices.Insert(allocs, i, a)
}
