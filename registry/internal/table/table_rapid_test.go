package table

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/plugvisor/plugvisor/messages"
	"pgregory.net/rapid"
)

// tableMachine drives a Table and its model, each name's allocations
// newest first, through adds, replaces, removes and clones, small and
// large: a few dozen names, so that tables grow past smallMax, and names
// get several allocations whose newest comes and goes.
type tableMachine struct {
	table  *Table
	model  map[string][]*Allocation
	order  uint64
	clones []*Table
	frozen []map[string][]*Allocation
}

func (m *tableMachine) Add(t *rapid.T) {
	for range rapid.IntRange(1, 20).Draw(t, "run") {
		m.order++
		name := fmt.Sprint("p", rapid.IntRange(0, 60).Draw(t, "name"))
		a := NewAllocation(&messages.PluginInfo{Name: name, AllocId: fmt.Sprint("a", m.order)}, m.order, m.order)
		m.table.Add(a)
		m.model[name] = append([]*Allocation{a}, m.model[name]...)
	}
}

// held draws an allocation the model holds, or skips the step.
func (m *tableMachine) held(t *rapid.T) (string, int) {
	names := slices.Sorted(maps.Keys(m.model))
	if len(names) == 0 {
		t.Skip("nothing held")
	}
	name := rapid.SampledFrom(names).Draw(t, "held")
	return name, rapid.IntRange(0, len(m.model[name])-1).Draw(t, "which")
}

func (m *tableMachine) Put(t *rapid.T) {
	name, i := m.held(t)
	old := m.model[name][i]
	m.order++
	a := NewAllocation(&messages.PluginInfo{Name: name, AllocId: old.plugin.AllocId, Version: fmt.Sprint(m.order)}, old.Order(), m.order)
	m.table.Put(a)
	m.model[name] = slices.Clone(m.model[name])
	m.model[name][i] = a
}

func (m *tableMachine) Remove(t *rapid.T) {
	name, i := m.held(t)
	gone := m.model[name][i]
	now, ok := m.table.Remove(gone)
	rest := slices.Delete(slices.Clone(m.model[name]), i, i+1)
	if len(rest) == 0 {
		delete(m.model, name)
		if ok {
			t.Fatalf("Remove(%s/%s) says %v is current; none is left", name, gone.plugin.AllocId, now)
		}
		return
	}
	m.model[name] = rest
	if !ok || now != rest[0] {
		t.Fatalf("Remove(%s/%s) says %v is current, want %v", name, gone.plugin.AllocId, now, rest[0])
	}
}

func (m *tableMachine) Clone(t *rapid.T) {
	if len(m.clones) == 3 { // each is checked at every step: keep the newest
		m.clones, m.frozen = m.clones[1:], m.frozen[1:]
	}
	m.clones = append(m.clones, m.table.Clone())
	m.frozen = append(m.frozen, maps.Clone(m.model))
}

// Fork goes on writing a clone of a clone, as the registry does when it
// remakes its working tables from a snapshot's (Types.Working), and keeps
// the snapshot's.
func (m *tableMachine) Fork(t *rapid.T) {
	m.Clone(t)
	m.table = m.clones[len(m.clones)-1].Clone()
}

func (m *tableMachine) Check(t *rapid.T) {
	for i, c := range m.clones {
		if err := c.matches(m.frozen[i]); err != nil {
			t.Fatalf("clone %d changed: %v", i, err)
		}
	}
	if err := m.table.matches(m.model); err != nil {
		t.Fatal(err)
	}
}

// TestTableAgainstModel: whatever the adds, replaces, removes, clones and
// forks, with the recent names merged into the store after every change,
// after a few, or after recentMax, a table answers as its model does
// (each name's current allocation, its allocations newest first, the
// current of each name in order), and each clone as the model did when it
// was taken.
func TestTableAgainstModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		table := New()
		table.recentMax = rapid.SampledFrom([]int{0, 1, 3, recentMax}).Draw(t, "recentMax")
		t.Repeat(rapid.StateMachineActions(&tableMachine{table: table, model: map[string][]*Allocation{}}))
	})
}

// matches reports where t answers otherwise than model.
func (t *Table) matches(model map[string][]*Allocation) error {
	want, got := "", ""
	for _, name := range slices.Sorted(maps.Keys(model)) {
		want += name + "=" + model[name][0].plugin.AllocId + " "
	}
	t.EachCurrent(func(a *Allocation) { got += a.plugin.Name + "=" + a.plugin.AllocId + " " })
	if got != want {
		return fmt.Errorf("EachCurrent\n got %s\nwant %s", got, want)
	}
	held := 0
	for _, allocs := range model {
		held += len(allocs)
	}
	if t.Len() != held {
		return fmt.Errorf("Len is %d, want %d", t.Len(), held)
	}
	for i := range 62 {
		name := fmt.Sprint("p", i)
		allocs := model[name]
		cur, _ := t.currentOf(name)
		if len(allocs) == 0 && cur != nil || len(allocs) > 0 && cur != allocs[0] {
			return fmt.Errorf("current of %s is %v, want %v", name, cur, allocs)
		}
		var infos []*messages.PluginInfo
		for _, a := range allocs {
			infos = append(infos, a.Info())
			if c, found := t.Find(name, a.plugin.AllocId); c != allocs[0] || found != a {
				return fmt.Errorf("Find(%s, %s) = %v, %v; want %v, %v", name, a.plugin.AllocId, c, found, allocs[0], a)
			}
		}
		if c, found := t.Find(name, "none"); found != nil || len(allocs) > 0 && c != allocs[0] {
			return fmt.Errorf("Find(%s, none) = %v, %v; want %v, nil", name, c, found, allocs)
		}
		if got := t.Allocations(name); !slices.Equal(got, infos) {
			return fmt.Errorf("Allocations(%s) = %v, want %v", name, got, infos)
		}
	}
	return nil
}
