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
