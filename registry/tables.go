package registry

import (
	"cmp"
	"slices"
	"strings"
)

// typeTables is a snapshot's tables by plugin type, sorted by type. A node
// has a few plugin types, and every batch freezes a new set of them: a
// copy of this slice is one small allocation, where a map's clone was a
// tenth of the bytes a busy registry allocated. It is never changed once
// in a snapshot; with returns a changed copy.
type typeTables []typeTable

type typeTable struct {
	ptype string
	table *pluginTable
}

// tablesOf freezes working tables: each is cloned (O(1)).
func tablesOf(working map[string]*pluginTable) typeTables {
	out := make(typeTables, 0, len(working))
	for ptype, t := range working {
		out = append(out, typeTable{ptype, t.clone()})
	}
	slices.SortFunc(out, func(a, b typeTable) int { return cmp.Compare(a.ptype, b.ptype) })
	return out
}

// scanTypes is how many types get scans before it searches.
const scanTypes = 8

func (ts typeTables) find(ptype string) (int, bool) {
	return slices.BinarySearchFunc(ts, ptype, func(t typeTable, p string) int { return cmp.Compare(t.ptype, p) })
}

// get returns the table of ptype. A read (DispensePlugin) asks it every
// time: with the few types of a node, a scan for an equal string is
// cheaper than a binary search's comparisons.
func (ts typeTables) get(ptype string) (*pluginTable, bool) {
	if len(ts) <= scanTypes {
		for i := range ts {
			if ts[i].ptype == ptype {
				return ts[i].table, true
			}
		}
		return nil, false
	}
	if i, ok := ts.find(ptype); ok {
		return ts[i].table, true
	}
	return nil, false
}

// with returns a copy of ts with a clone of each of the changed working
// tables in place.
func (ts typeTables) with(changed typeTables) typeTables {
	out := slices.Clone(ts)
	for _, c := range changed {
		t := c.table.clone()
		if i, ok := out.find(c.ptype); ok {
			out[i].table = t
		} else {
			// A key of its own, as the actor's (pluginsActor.table).
			out = slices.Insert(out, i, typeTable{strings.Clone(c.ptype), t})
		}
	}
	return out
}

// working returns working tables for the actor: clones of ts's.
func (ts typeTables) working() map[string]*pluginTable {
	out := make(map[string]*pluginTable, len(ts))
	for _, t := range ts {
		out[t.ptype] = t.table.clone()
	}
	return out
}
