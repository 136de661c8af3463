package table

import (
	"cmp"
	"slices"
	"strings"
)

// Types are a snapshot's tables, one per plugin type, sorted by type.
//
// A node has a few plugin types, and every batch freezes a new set of
// them. A copy of this slice is one small allocation. A map's clone was a
// tenth of the bytes a busy registry allocated.
//
// Types in a snapshot never change. Working.Cut returns a changed copy.
type Types []TypeTable

// TypeTable is the table of one plugin type.
type TypeTable struct {
	Type  string
	Table *Table
}

// scanTypes is how many types Get scans before it searches.
const scanTypes = 8

func (ts Types) find(ptype string) (int, bool) {
	return slices.BinarySearchFunc(ts, ptype, func(t TypeTable, p string) int { return cmp.Compare(t.Type, p) })
}

// Get returns the table of ptype. A read (DispensePlugin) asks it every
// time. With the few types of a node, a scan for an equal string is
// cheaper than a binary search's comparisons.
func (ts Types) Get(ptype string) (*Table, bool) {
	if len(ts) <= scanTypes {
		for i := range ts {
			if ts[i].Type == ptype {
				return ts[i].Table, true
			}
		}
		return nil, false
	}
	if i, ok := ts.find(ptype); ok {
		return ts[i].Table, true
	}
	return nil, false
}

// with returns a copy of ts with a clone of each of the changed working
// tables in place.
func (ts Types) with(changed Types) Types {
	out := slices.Clone(ts)
	for _, c := range changed {
		t := c.Table.Clone()
		if i, ok := out.find(c.Type); ok {
			out[i].Table = t
		} else {
			// A key of its own, as Working.Table's.
			out = slices.Insert(out, i, TypeTable{strings.Clone(c.Type), t})
		}
	}
	return out
}

// Working returns working tables made from ts: clones of its tables.
func (ts Types) Working() *Working {
	w := &Working{tables: make(map[string]*Table, len(ts))}
	for _, t := range ts {
		w.tables[t.Type] = t.Table.Clone()
	}
	return w
}

// Working is the registry actor's working state: a table per plugin type,
// and the types changed since the last Cut. Only the actor uses it.
type Working struct {
	tables map[string]*Table
	dirty  Types // the working tables changed since the last Cut
}

// NewWorking returns working state with no table.
func NewWorking() *Working { return &Working{tables: map[string]*Table{}} }

// Lookup returns the working table of ptype.
func (w *Working) Lookup(ptype string) (*Table, bool) {
	t, ok := w.tables[ptype]
	return t, ok
}

// Table returns the working table of ptype, made empty when there is none.
func (w *Working) Table(ptype string) *Table {
	t, ok := w.tables[ptype]
	if !ok {
		t = New()
		// A key of its own: ptype may be a view into the string block of
		// the type's first registration (copyInto).
		w.tables[strings.Clone(ptype)] = t
	}
	return t
}

// Changed notes that t, the working table of ptype, changed since the
// last Cut.
func (w *Working) Changed(ptype string, t *Table) {
	if !t.dirty {
		t.dirty = true
		w.dirty = append(w.dirty, TypeTable{ptype, t})
	}
}

// Cut freezes the tables changed since the last Cut on top of base, the
// tables of the last snapshot. Only the changed types are cloned, each in
// O(1). The tables that Cut returns never change.
func (w *Working) Cut(base Types) Types {
	out := base.with(w.dirty)
	for _, d := range w.dirty {
		d.Table.dirty = false
	}
	clear(w.dirty)
	w.dirty = w.dirty[:0]
	return out
}

// Freeze returns every working table frozen: each is cloned, in O(1).
func (w *Working) Freeze() Types {
	out := make(Types, 0, len(w.tables))
	for ptype, t := range w.tables {
		out = append(out, TypeTable{ptype, t.Clone()})
	}
	slices.SortFunc(out, func(a, b TypeTable) int { return cmp.Compare(a.Type, b.Type) })
	return out
}
