package registry

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
	work := newPluginTable()
	type frozen struct {
		table *pluginTable
		want  string
	}
	var clones []frozen
	seen := func(tb *pluginTable) string {
		s := ""
		tb.eachCurrent(func(a *allocation) { s += fmt.Sprintf("%s=%s ", a.info().GetName(), a.info().GetAllocId()) })
		return s + fmt.Sprint(tb.len())
	}
	for i := 1; i <= 2*smallMax; i++ {
		name := fmt.Sprintf("p%d", i%5)
		a := newAllocation(&messages.PluginInfo{Name: name, AllocId: fmt.Sprintf("a%02d", i)}, uint64(i), uint64(i))
		if i%2 == 0 {
			work.add(a)
		} else {
			work.put(a)
		}
		if cur, ok := work.currentOf(name); !ok || cur != a {
			t.Fatalf("after put %d: current of %s is %v, want the new allocation", i, name, cur)
		}
		if cur, found := work.find(name, a.info().GetAllocId()); cur != a || found != a {
			t.Fatalf("after put %d: find = %v, %v; want the new allocation twice", i, cur, found)
		}
		if i%3 == 0 {
			old, ok := work.get(name, fmt.Sprintf("a%02d", i-5))
			if i > 5 && !ok {
				t.Fatalf("after put %d: allocation a%02d of %s not found", i, i-5, name)
			}
			if ok {
				now, _ := work.remove(old)
				if _, still := work.get(name, old.info().GetAllocId()); still {
					t.Fatalf("after remove %s: still found", old.info().GetAllocId())
				}
				if cur, _ := work.currentOf(name); now != cur {
					t.Fatalf("after remove %s: remove says %v is current, currentOf %v", old.info().GetAllocId(), now, cur)
				}
				if cur, found := work.find(name, old.info().GetAllocId()); cur != now || found != nil {
					t.Fatalf("after remove %s: find = %v, %v; want %v, nil", old.info().GetAllocId(), cur, found, now)
				}
			}
		}
		c := work.clone()
		clones = append(clones, frozen{c, seen(c)})
	}
	if work.allocs == nil {
		t.Fatalf("a table of %d allocations is still a slice; want B-trees past smallMax=%d", work.len(), smallMax)
	}
	for i, c := range clones {
		if got := seen(c.table); got != c.want {
			t.Errorf("clone %d changed after later writes: %q, was %q", i, got, c.want)
		}
	}
}

// TestSnapshotChangedClosesWhenAskedBeforeOrAfter: Changed is made on
// demand; it closes once the snapshot is replaced whether a reader asked
// for it before, after or while the publisher replaced it.
func TestSnapshotChangedClosesWhenAskedBeforeOrAfter(t *testing.T) {
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	before := newSnapshot(nil, 1)
	ch := before.Changed()
	if closed(ch) {
		t.Fatal("Changed is closed before the snapshot was replaced")
	}
	before.supersede()
	if !closed(ch) || !closed(before.Changed()) {
		t.Fatal("Changed asked before the replacement did not close")
	}
	after := newSnapshot(nil, 1)
	after.supersede()
	if !closed(after.Changed()) {
		t.Fatal("Changed asked after the replacement is not closed")
	}
	for range 200 {
		s := newSnapshot(nil, 1)
		got := make(chan (<-chan struct{}), 4)
		for range 4 {
			go func() { got <- s.Changed() }()
		}
		s.supersede()
		for range 4 {
			if c := <-got; !closed(c) {
				<-c // must close by now: a hang here fails the test
			}
		}
	}
}

// TestLargeTableNamesOfOneAndMore: past smallMax, names with one allocation
// and names with several (whose newest-first items come and go as they
// grow to two and shrink to one) agree with a plain model after every
// change: the current of each name, the list, and every allocation.
func TestLargeTableNamesOfOneAndMore(t *testing.T) {
	work := newPluginTable()
	model := map[string][]*allocation{} // newest first
	check := func(step string) {
		t.Helper()
		want := ""
		for _, name := range slices.Sorted(maps.Keys(model)) {
			if len(model[name]) > 0 {
				want += name + "=" + model[name][0].info().GetAllocId() + " "
			}
		}
		got := ""
		work.eachCurrent(func(a *allocation) { got += a.info().GetName() + "=" + a.info().GetAllocId() + " " })
		if got != want {
			t.Fatalf("%s: eachCurrent\n got %s\nwant %s", step, got, want)
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
		}
	}
	order := uint64(0)
	for i := range 4 * smallMax {
		name := fmt.Sprintf("p%03d", i%(3*smallMax)) // the first smallMax names get a second allocation
		order++
		a := newAllocation(&messages.PluginInfo{Name: name, AllocId: fmt.Sprintf("a%03d", i)}, order, order)
		work.add(a)
		model[name] = append([]*allocation{a}, model[name]...)
		check(fmt.Sprintf("add %s/%s", name, a.info().GetAllocId()))
	}
	if work.allocs == nil {
		t.Fatal("the table never grew into B-trees")
	}
	for i := range smallMax {
		name := fmt.Sprintf("p%03d", i)
		allocs := model[name]
		gone := allocs[i%2] // the newest or the older of two
		now, _ := work.remove(gone)
		model[name] = slices.DeleteFunc(slices.Clone(allocs), func(a *allocation) bool { return a == gone })
		if now != model[name][0] {
			t.Fatalf("remove %s: remove says %v is current, want %v", gone.info().GetAllocId(), now, model[name][0])
		}
		check("remove " + gone.info().GetAllocId())
		snap := work.clone()
		again := newAllocation(&messages.PluginInfo{Name: name, AllocId: "z" + gone.info().GetAllocId()}, order+1, order+1)
		order++
		work.put(again)
		model[name] = append([]*allocation{again}, model[name]...)
		check("put " + again.info().GetAllocId())
		if cur, _ := snap.currentOf(name); cur != model[name][1] {
			t.Fatalf("a clone taken before put %s changed: current %v", again.info().GetAllocId(), cur)
		}
	}
	if n := work.newest.Len(); n != 2*smallMax {
		t.Fatalf("the newest-first tree holds %d allocations, want %d: only names of two or more", n, 2*smallMax)
	}
}
