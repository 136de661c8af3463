package table

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/plugvisor/plugvisor/messages"
)

// TestSmallTableFrozenAndGrown: a table changes the same way as a small
// slice and once past smallMax in B-trees, and a clone taken at any point
// (what a snapshot holds) keeps what it saw while the working table goes on.
func TestSmallTableFrozenAndGrown(t *testing.T) {
	work := New()
	type frozen struct {
		table *Table
		want  string
	}
	var clones []frozen
	seen := func(tb *Table) string {
		s := ""
		tb.EachCurrent(func(a *Allocation) { s += fmt.Sprintf("%s=%s ", a.Info().GetName(), a.Info().GetAllocId()) })
		return s + fmt.Sprint(tb.Len())
	}
	for i := 1; i <= 2*smallMax; i++ {
		name := fmt.Sprintf("p%d", i%5)
		a := NewAllocation(&messages.PluginInfo{Name: name, AllocId: fmt.Sprintf("a%02d", i)}, uint64(i), uint64(i))
		if i%2 == 0 {
			work.Add(a)
		} else {
			work.Put(a)
		}
		if cur, ok := work.currentOf(name); !ok || cur != a {
			t.Fatalf("after put %d: current of %s is %v, want the new allocation", i, name, cur)
		}
		if cur, found := work.Find(name, a.Info().GetAllocId()); cur != a || found != a {
			t.Fatalf("after put %d: find = %v, %v; want the new allocation twice", i, cur, found)
		}
		if i%3 == 0 {
			old, ok := work.Get(name, fmt.Sprintf("a%02d", i-5))
			if i > 5 && !ok {
				t.Fatalf("after put %d: allocation a%02d of %s not found", i, i-5, name)
			}
			if ok {
				now, _ := work.Remove(old)
				if _, still := work.Get(name, old.Info().GetAllocId()); still {
					t.Fatalf("after remove %s: still found", old.Info().GetAllocId())
				}
				if cur, _ := work.currentOf(name); now != cur {
					t.Fatalf("after remove %s: remove says %v is current, currentOf %v", old.Info().GetAllocId(), now, cur)
				}
				if cur, found := work.Find(name, old.Info().GetAllocId()); cur != now || found != nil {
					t.Fatalf("after remove %s: find = %v, %v; want %v, nil", old.Info().GetAllocId(), cur, found, now)
				}
			}
		}
		c := work.Clone()
		clones = append(clones, frozen{c, seen(c)})
	}
	if work.base.allocs == nil {
		t.Fatalf("a table of %d allocations is still a slice; want B-trees past smallMax=%d", work.Len(), smallMax)
	}
	for i, c := range clones {
		if got := seen(c.table); got != c.want {
			t.Errorf("clone %d changed after later writes: %q, was %q", i, got, c.want)
		}
	}
}

// mergedEachWrite returns an empty table that merges each change of a
// large table into its store at once, so that the store's trees hold it.
func mergedEachWrite() *Table {
	t := New()
	t.recentMax = 0
	return t
}

// TestLargeTableNamesOfOneAndMore: past smallMax, names with one allocation
// and names with several (whose newest-first items come and go as they
// grow to two and shrink to one) agree with a plain model after every
// change: the current of each name, the list, and every allocation.
func TestLargeTableNamesOfOneAndMore(t *testing.T) {
	work := mergedEachWrite()
	model := map[string][]*Allocation{} // newest first
	check := func(step string) {
		t.Helper()
		want := ""
		for _, name := range slices.Sorted(maps.Keys(model)) {
			if len(model[name]) > 0 {
				want += name + "=" + model[name][0].Info().GetAllocId() + " "
			}
		}
		got := ""
		work.EachCurrent(func(a *Allocation) { got += a.Info().GetName() + "=" + a.Info().GetAllocId() + " " })
		if got != want {
			t.Fatalf("%s: eachCurrent\n got %s\nwant %s", step, got, want)
		}
		for name, allocs := range model {
			if in := work.base.newest != nil && work.base.topOf(name) != nil; in != (len(allocs) > 1) {
				t.Fatalf("%s: %s has %d allocations and is in the newest-first tree: %v; want it there only with two or more", step, name, len(allocs), in)
			}
		}
		listed := ""
		for _, p := range work.Clone().Plugins() {
			listed += p.GetName() + "=" + p.GetAllocId() + " "
		}
		if listed != want {
			t.Fatalf("%s: Plugins\n got %s\nwant %s", step, listed, want)
		}
		for name, allocs := range model {
			cur, ok := work.currentOf(name)
			if len(allocs) == 0 {
				if ok {
					t.Fatalf("%s: %s has no allocation, currentOf says %v", step, name, cur)
				}
				continue
			}
			if cur != allocs[0] {
				t.Fatalf("%s: current of %s is %v, want %v", step, name, cur, allocs[0])
			}
			if p, _ := work.Current(name); p != allocs[0].Info() {
				t.Fatalf("%s: Current(%s) is %v, want %v", step, name, p, allocs[0].Info())
			}
		}
	}
	order := uint64(0)
	for i := range 4 * smallMax {
		name := fmt.Sprintf("p%03d", i%(3*smallMax)) // the first smallMax names get a second allocation
		order++
		a := NewAllocation(&messages.PluginInfo{Name: name, AllocId: fmt.Sprintf("a%03d", i)}, order, order)
		work.Add(a)
		model[name] = append([]*Allocation{a}, model[name]...)
		check(fmt.Sprintf("add %s/%s", name, a.Info().GetAllocId()))
	}
	if work.base.allocs == nil {
		t.Fatal("the table never grew into B-trees")
	}
	for i := range smallMax {
		name := fmt.Sprintf("p%03d", i)
		allocs := model[name]
		gone := allocs[i%2] // the newest or the older of two
		now, _ := work.Remove(gone)
		model[name] = slices.DeleteFunc(slices.Clone(allocs), func(a *Allocation) bool { return a == gone })
		if now != model[name][0] {
			t.Fatalf("remove %s: remove says %v is current, want %v", gone.Info().GetAllocId(), now, model[name][0])
		}
		check("remove " + gone.Info().GetAllocId())
		snap := work.Clone()
		again := NewAllocation(&messages.PluginInfo{Name: name, AllocId: "z" + gone.Info().GetAllocId()}, order+1, order+1)
		order++
		work.Put(again)
		model[name] = append([]*Allocation{again}, model[name]...)
		check("put " + again.Info().GetAllocId())
		if cur, _ := snap.currentOf(name); cur != model[name][1] {
			t.Fatalf("a clone taken before put %s changed: current %v", again.Info().GetAllocId(), cur)
		}
	}
	if n := work.base.newest.Len(); n != 2*smallMax {
		t.Fatalf("the newest-first tree holds %d allocations, want %d: only names of two or more", n, 2*smallMax)
	}
}
