package table

import (
	"cmp"
	"slices"
	"strings"
)

// smallMax is how many allocations a table keeps in one sorted slice
// before it moves them into B-trees.
//
// A small table is the common case (a node has a few plugins of a type)
// and the slice makes it cheap to freeze: a snapshot shares the slice, and
// the working table copies it on its first change after the cut, then
// changes its copy in place until the next cut. That is one allocation per
// batch and type, where the two B-trees took a clone of each (three
// allocations apiece) and a copy of every node on the path of each change.
const smallMax = 32

// smallSet is the allocations of a small table, sorted by name, newest
// first within a name (compareNewest): the first of a name is current.
// A slice shared with a snapshot is never changed; see store.owned.
type smallSet []*Allocation

func compareNewest(a, b *Allocation) int {
	if c := strings.Compare(a.Info().GetName(), b.Info().GetName()); c != 0 {
		return c
	}
	return cmp.Compare(b.Order(), a.Order())
}

// run returns the bounds of name's allocations: a lower bound by one
// string comparison per step (every write searches its name, some twice).
func (s smallSet) run(name string) (from, to int) {
	from, to = 0, len(s)
	for from < to {
		h := int(uint(from+to) >> 1)
		if s[h].plugin.Name < name {
			from = h + 1
		} else {
			to = h
		}
	}
	to = from
	for to < len(s) && s[to].plugin.Name == name {
		to++
	}
	return from, to
}

// get finds the allocation alloc of name.
func (s smallSet) get(name, alloc string) (*Allocation, bool) {
	from, to := s.run(name)
	for _, a := range s[from:to] {
		if a.Info().GetAllocId() == alloc {
			return a, true
		}
	}
	return nil, false
}

// current returns name's newest allocation.
func (s smallSet) current(name string) (*Allocation, bool) {
	from, to := s.run(name)
	if from == to {
		return nil, false
	}
	return s[from], true
}

// each calls fn with the current allocation of each name, in name order.
func (s smallSet) each(fn func(*Allocation)) {
	for i, a := range s {
		if i == 0 || s[i-1].Info().GetName() != a.Info().GetName() {
			fn(a)
		}
	}
}

// without returns s less the allocation with a's name and alloc ID, and
// whether it held one. It changes s in place.
func (s smallSet) without(a *Allocation) (smallSet, bool) {
	from, to := s.run(a.Info().GetName())
	for i := from; i < to; i++ {
		if s[i].Info().GetAllocId() == a.Info().GetAllocId() {
			return slices.Delete(s, i, i+1), true
		}
	}
	return s, false
}

// removeSmall is remove for a small table: the search that finds a finds
// its name's new current too.
func (t *store) removeSmall(a *Allocation) (now *Allocation, ok bool) {
	s := t.mutable()
	from, to := s.run(a.plugin.Name)
	for i := from; i < to; i++ {
		if s[i].plugin.AllocId == a.plugin.AllocId {
			s, to = slices.Delete(s, i, i+1), to-1
			break
		}
	}
	t.small = s
	if from == to {
		return nil, false
	}
	return s[from], true
}

// with returns s with a in its place, replacing the allocation with the
// same name and alloc ID. It changes s in place.
func (s smallSet) with(a *Allocation) smallSet {
	s, _ = s.without(a)
	return s.inserted(a)
}

// inserted returns s with a, which it does not hold, in its place. It
// changes s in place.
func (s smallSet) inserted(a *Allocation) smallSet {
	i, _ := slices.BinarySearchFunc(s, a, compareNewest)
	return slices.Insert(s, i, a)
}

// mutable returns the table's slice, copied first unless the working
// table already owns it (it has changed it since the last cut).
func (t *store) mutable() smallSet {
	if !t.owned {
		s := make(smallSet, len(t.small), max(len(t.small)+1, 4))
		copy(s, t.small)
		t.small, t.owned = s, true
	}
	return t.small
}

// putSmall is put (replace) or add for a small table, moving it into
// B-trees once it grows past smallMax.
func (t *store) putSmall(a *Allocation, replace bool) {
	if replace {
		t.small = t.mutable().with(a)
	} else {
		t.small = t.mutable().inserted(a)
	}
	if len(t.small) <= smallMax {
		return
	}
	t.allocs, t.newest = newTrees()
	for i, x := range t.small {
		t.allocs.ReplaceOrInsert(x)
		name := x.Info().GetName()
		if i > 0 && t.small[i-1].Info().GetName() == name || i+1 < len(t.small) && t.small[i+1].Info().GetName() == name {
			t.newest.ReplaceOrInsert(x) // see store: names of two or more
		}
	}
	t.small, t.owned = nil, false
}
