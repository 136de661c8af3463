package table

import (
	"slices"
	"sync"
)

// store holds the allocations of one plugin type, without a Table's
// recent changes.
//
// Up to smallMax allocations sit in one sorted slice (see smallSet). Past
// that they sit in two B-trees (allocTree):
//   - by (name, alloc), for lookups;
//   - by (name, newest first), whose first item of a name is that name's
//     current allocation. It holds only the names with two allocations or
//     more. A name with one, the common case, is its own current: it is
//     found in the first tree and costs one tree's item instead of two
//     (about 10 bytes of a plugin's heap).
//
// Every change of a large table costs O(log n), whatever the number of
// older allocations of a name. Clone is O(1) either way. The trees share
// nodes copy-on-write, and the slice is copied on the first change after a
// clone. So a clone handed to readers never changes under them.
//
// A working store is written by one goroutine, the registry actor's. A
// clone frozen in a snapshot may be read by any number of goroutines.
type store struct {
	small smallSet // nil once allocs and newest hold the table
	// owned is set on a working table that has copied small since its
	// last clone, and so may change it in place.
	owned  bool
	allocs *allocTree
	newest *allocTree
}

// newTrees returns the two empty trees of a large table: by (name, alloc)
// and by (name, newest first).
func newTrees() (allocs, newest *allocTree) {
	return newAllocTree(compareAlloc), newAllocTree(compareNewest)
}

// Clone returns a copy that shares nodes until either side changes.
func (t *store) Clone() *store {
	if t.allocs == nil {
		if t.owned {
			t.owned = false // a table frozen in a snapshot is never written
		}
		return &store{small: t.small}
	}
	return &store{allocs: t.allocs.Clone(), newest: t.newest.Clone()}
}

// Len is how many allocations the table holds.
func (t *store) Len() int {
	if t.allocs == nil {
		return len(t.small)
	}
	return t.allocs.Len()
}

func probe(name, alloc string) *Allocation {
	a := &Allocation{}
	a.plugin.Name, a.plugin.AllocId = name, alloc
	return a
}

// probes recycles the search keys of lookups: readers look plugins up
// from many goroutines at once, and a fresh key per lookup was most of the
// cost of DispensePlugin.
var probes = sync.Pool{New: func() any { return probe("", "") }}

// lookup finds the item of tree with name and alloc.
func lookup(tree *allocTree, name, alloc string) (*Allocation, bool) {
	key := borrowKey(name, alloc, 0)
	defer returnKey(key)
	return tree.Get(key)
}

// borrowKey takes a search key from probes; returnKey gives it back.
// order is at most MaxSequence (the newest first of a name takes
// MaxSequence), so that a key, like every allocation not made by
// NewAllocation, has no updatedBit.
func borrowKey(name, alloc string, order uint64) *Allocation {
	key := probes.Get().(*Allocation)
	key.plugin.Name, key.plugin.AllocId, key.ord = name, alloc, order
	return key
}

func returnKey(key *Allocation) {
	key.plugin.Name, key.plugin.AllocId, key.ord = "", "", 0
	probes.Put(key)
}

func (t *store) Get(name, alloc string) (*Allocation, bool) {
	if t.allocs == nil {
		return t.small.get(name, alloc)
	}
	return lookup(t.allocs, name, alloc)
}

// find returns the current allocation of name and its allocation alloc,
// each nil when there is none: for a small table, with one search.
func (t *store) Find(name, alloc string) (current, found *Allocation) {
	if t.allocs == nil {
		from, to := t.small.run(name)
		if from == to {
			return nil, nil
		}
		for _, a := range t.small[from:to] {
			if a.Info().GetAllocId() == alloc {
				found = a
				break
			}
		}
		return t.small[from], found
	}
	current, _ = t.currentOf(name)
	found, _ = t.Get(name, alloc)
	return current, found
}

// sole returns the first allocation of name in a large table's allocs,
// nil when it has none, and whether name has more than that one.
func (t *store) sole(name string) (first *Allocation, more bool) {
	key := borrowKey(name, "", 0)
	defer returnKey(key)
	t.allocs.AscendGreaterOrEqual(key, func(a *Allocation) bool {
		if a.Info().GetName() != name {
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
func (t *store) topOf(name string) *Allocation {
	key := borrowKey(name, "", MaxSequence)
	defer returnKey(key)
	top := t.first(key)
	if top == nil || top.Info().GetName() != name {
		return nil
	}
	return top
}

// currentOf returns the current allocation of name: its newest. A name
// with one allocation, the common case, costs one search of a large
// table.
func (t *store) currentOf(name string) (*Allocation, bool) {
	if t.allocs == nil {
		return t.small.current(name)
	}
	first, more := t.sole(name)
	if more {
		return t.topOf(name), true
	}
	return first, first != nil
}

// first returns the first allocation of the newest-first tree at or after
// key, or nil.
func (t *store) first(key *Allocation) *Allocation {
	var top *Allocation
	t.newest.AscendGreaterOrEqual(key, func(a *Allocation) bool {
		top = a
		return false
	})
	return top
}

// EachCurrent calls fn with the current allocation of each name, in name
// order. A large table is walked in (name, alloc) order without reading
// any allocation: a name with one allocation is its own current, and the
// allocations of the names with more are exactly the newest-first tree's,
// so a set of those (with each one's current) says which to skip.
func (t *store) EachCurrent(fn func(*Allocation)) {
	if t.allocs == nil {
		t.small.each(fn)
		return
	}
	if t.newest.Len() == 0 {
		t.allocs.Ascend(func(a *Allocation) bool { fn(a); return true })
		return
	}
	currentOf := make(map[*Allocation]*Allocation, t.newest.Len())
	var top *Allocation
	t.newest.Ascend(func(a *Allocation) bool {
		if top == nil || top.plugin.Name != a.plugin.Name {
			top = a
		}
		currentOf[a] = top
		return true
	})
	var told *Allocation
	t.allocs.Ascend(func(a *Allocation) bool {
		cur, ok := currentOf[a]
		switch {
		case !ok:
			fn(a)
		case cur != told:
			fn(cur)
			told = cur
		}
		return true
	})
}

// put adds a or replaces the allocation with the same name and alloc ID.
// A replacement must keep its order.
func (t *store) Put(a *Allocation) {
	if t.allocs == nil {
		t.putSmall(a, true)
		return
	}
	if _, ok := lookup(t.allocs, a.Info().GetName(), a.Info().GetAllocId()); !ok {
		t.Add(a)
		return
	}
	t.allocs.ReplaceOrInsert(a)
	if t.topOf(a.Info().GetName()) != nil {
		t.newest.ReplaceOrInsert(a)
	}
}

// add is put for an allocation the table does not hold.
func (t *store) Add(a *Allocation) {
	if t.allocs == nil {
		t.putSmall(a, false)
		return
	}
	if t.topOf(a.Info().GetName()) != nil {
		t.newest.ReplaceOrInsert(a)
	} else if first, _ := t.sole(a.Info().GetName()); first != nil {
		t.newest.ReplaceOrInsert(first)
		t.newest.ReplaceOrInsert(a)
	}
	t.allocs.ReplaceOrInsert(a)
}

// remove deletes a, which the table holds; the next newest allocation of
// its name, if any, becomes current, and remove returns it.
func (t *store) Remove(a *Allocation) (now *Allocation, ok bool) {
	if t.allocs == nil {
		return t.removeSmall(a)
	}
	t.allocs.Delete(a)
	if _, was := t.newest.Delete(a); was {
		if first, more := t.sole(a.Info().GetName()); first != nil && !more {
			t.newest.Delete(first) // one left: it needs no newest-first item
		}
	}
	return t.currentOf(a.Info().GetName())
}

// allocationsUpTo returns every allocation of name, newest (current)
// first, in a slice of the caller's own (nil when there is none), and
// true; or false, having read limit + 1 of them, when there are more than
// limit. A limit below 0 is none.
func (t *store) allocationsUpTo(name string, limit int) ([]*Allocation, bool) {
	var out []*Allocation
	switch {
	case t.allocs == nil:
		from, to := t.small.run(name)
		if from < to {
			out = slices.Clone(t.small[from:to])
		}
	case t.topOf(name) == nil:
		if first, _ := t.sole(name); first != nil {
			out = []*Allocation{first}
		}
	default:
		key := borrowKey(name, "", MaxSequence)
		defer returnKey(key)
		t.newest.AscendGreaterOrEqual(key, func(a *Allocation) bool {
			if a.Info().GetName() != name {
				return false
			}
			out = append(out, a)
			return limit < 0 || len(out) <= limit
		})
	}
	return out, limit < 0 || len(out) <= limit
}
