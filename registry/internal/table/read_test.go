package table

import (
	"fmt"
	"testing"

	"github.com/plugvisor/plugvisor/messages"
)

// TestAReadOfAFreshCloneBuildsNothing: a table frozen in a snapshot
// answers Current and Plugins from its trees as they are. Every write makes
// a new snapshot, so a read that built an index of every name on a new
// snapshot's first call cost O(n) after each write; Current allocates
// nothing of its own now, and Plugins its result and, with names of more
// than one allocation, a set of those.
func TestAReadOfAFreshCloneBuildsNothing(t *testing.T) {
	work := New()
	const names = 10000
	for i := range names {
		work.Add(NewAllocation(&messages.PluginInfo{Name: fmt.Sprintf("p%05d", i), AllocId: "a0"}, uint64(i+1), uint64(i+1)))
	}
	work.Add(NewAllocation(&messages.PluginInfo{Name: "p04321", AllocId: "a1"}, names+1, names+1))
	const runs = 50
	clones := make([]*Table, 0, 2*(runs+1))
	for range cap(clones) {
		clones = append(clones, work.Clone())
	}
	next := 0
	fresh := func() *Table { next++; return clones[next-1] }

	current := testing.AllocsPerRun(runs, func() {
		if p, ok := fresh().Current("p04321"); !ok || p.GetAllocId() != "a1" {
			t.Fatalf("current of p04321: %v, %v; want a1", p, ok)
		}
	})
	if current > 1 { // the race detector's sync.Pool drops some search keys
		t.Errorf("Current on a fresh clone made %v allocations; want none of its own", current)
	}
	list := testing.AllocsPerRun(runs, func() {
		if n := len(fresh().Plugins()); n != names {
			t.Fatalf("Plugins listed %d; want %d", n, names)
		}
	})
	if list > 3 {
		t.Errorf("Plugins on a fresh clone made %v allocations; want its result and the set of names of two", list)
	}
}

// TestClonesReadWhileTheWorkingTableWrites: readers on other goroutines
// read clones (as snapshots are read) while the working table adds,
// replaces and removes allocations of a large table, its recent names
// merged now and then. Each clone answers what it held when it was taken,
// and the race detector sees no write to anything a clone shares.
func TestClonesReadWhileTheWorkingTableWrites(t *testing.T) {
	work := New()
	work.recentMax = 4
	const names = 200
	for i := range names {
		work.Add(NewAllocation(&messages.PluginInfo{Name: fmt.Sprintf("p%03d", i), AllocId: "a0"}, uint64(i+1), uint64(i+1)))
	}
	clones := make(chan *Table, 16)
	done := make(chan string)
	for range 2 {
		go func() {
			why := ""
			for c := range clones {
				n := 0
				c.EachCurrent(func(*Allocation) { n++ })
				if _, ok := c.Current("p007"); !ok || n != names || len(c.Plugins()) != names {
					why = fmt.Sprintf("a clone lists %d names and p007 %v; want %d and p007", n, ok, names)
				}
			}
			done <- why
		}()
	}
	order := uint64(names)
	for i := range 2000 {
		order++
		name := fmt.Sprintf("p%03d", i*7%names)
		a := NewAllocation(&messages.PluginInfo{Name: name, AllocId: fmt.Sprint("n", i)}, order, order)
		work.Add(a)
		clones <- work.Clone()
		if i%3 == 0 {
			work.Put(NewAllocation(&messages.PluginInfo{Name: name, AllocId: a.plugin.AllocId, Version: "2"}, order, order+1))
			order++
		}
		found, _ := work.Get(name, a.plugin.AllocId)
		work.Remove(found)
		clones <- work.Clone()
	}
	close(clones)
	for range 2 {
		if why := <-done; why != "" {
			t.Fatal(why)
		}
	}
}
