package gone

import (
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry/internal/table"
)

// TestGoneRemembersTheNewestDeregistrationsAndForgetsTheOldestFirst: the
// order of a deregistered allocation is found by its type, name and alloc
// ID, once; past Max the oldest remembered goes first, and an
// allocation that differs in any one of the three is not found.
func TestGoneRemembersTheNewestDeregistrationsAndForgetsTheOldestFirst(t *testing.T) {
	g := New()
	g.Remember("csi-node", "hp", "a1", 7)
	for _, k := range [][3]string{{"csi-other", "hp", "a1"}, {"csi-node", "hq", "a1"}, {"csi-node", "hp", "a2"}} {
		if _, ok := g.Take(k[0], k[1], k[2]); ok {
			t.Fatalf("%v found, but only (csi-node, hp, a1) was remembered", k)
		}
	}
	if order, ok := g.Take("csi-node", "hp", "a1"); !ok || order != 7 {
		t.Fatalf("take = %d, %v; want 7, true", order, ok)
	}
	if _, ok := g.Take("csi-node", "hp", "a1"); ok {
		t.Fatal("taken twice: take must forget what it returns")
	}

	for i := range Max + 10 {
		g.Remember("csi-node", "p", fmt.Sprint("a", i), uint64(i))
	}
	if g.Len() != Max {
		t.Fatalf("holds %d, want the bound %d", g.Len(), Max)
	}
	for i := range 10 {
		if _, ok := g.Take("csi-node", "p", fmt.Sprint("a", i)); ok {
			t.Fatalf("a%d found: the oldest must go first", i)
		}
	}
	for _, i := range []int{10, Max / 2, Max + 9} {
		if order, ok := g.Take("csi-node", "p", fmt.Sprint("a", i)); !ok || order != uint64(i) {
			t.Fatalf("a%d: take = %d, %v; want %d, true", i, order, ok, i)
		}
	}
	if g.Len() != Max-3 {
		t.Fatalf("holds %d after three takes, want %d", g.Len(), Max-3)
	}
}

// TestGoneKeysDoNotRunTogether: the three parts of a key are hashed apart,
// so ("ab", "c") and ("a", "bc") are two keys.
func TestGoneKeysDoNotRunTogether(t *testing.T) {
	g := New()
	g.Remember("t", "ab", "c", 1)
	g.Remember("t", "a", "bc", 2)
	if order, ok := g.Take("t", "a", "bc"); !ok || order != 2 {
		t.Fatalf("take(a, bc) = %d, %v; want 2, true", order, ok)
	}
	if order, ok := g.Take("t", "ab", "c"); !ok || order != 1 {
		t.Fatalf("take(ab, c) = %d, %v; want 1, true", order, ok)
	}
}

// TestGoneIsARingOfTheLastDeregistrations checks gone against a model, a
// ring of its capacity written in turn, with a capacity small enough that
// probes collide, runs wrap around the slots, and the ring wraps: every
// take finds exactly what the model holds, and len agrees.
func TestGoneIsARingOfTheLastDeregistrations(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		const n = 8
		g := NewOf(n)
		type key struct{ ptype, name, alloc string }
		type entry struct {
			key   key
			order uint64
			live  bool
		}
		var model [n]entry
		written := 0
		find := func(k key) int {
			for i, e := range model {
				if e.live && e.key == k {
					return i
				}
			}
			return -1
		}
		genKey := rapid.Custom(func(t *rapid.T) key {
			return key{
				rapid.SampledFrom([]string{"csi-node", "csi-controller"}).Draw(t, "ptype"),
				rapid.SampledFrom([]string{"a", "b", "ab", "c"}).Draw(t, "name"),
				rapid.SampledFrom([]string{"1", "2", "12", "3", "4"}).Draw(t, "alloc"),
			}
		})
		for step := range rapid.IntRange(1, 200).Draw(t, "steps") {
			k := genKey.Draw(t, "key")
			if rapid.Bool().Draw(t, "remember") {
				if i := find(k); i >= 0 {
					model[i].live = false
				}
				model[written%n] = entry{key: k, order: uint64(step), live: true}
				written++
				g.Remember(k.ptype, k.name, k.alloc, uint64(step))
			} else {
				order, ok := g.Take(k.ptype, k.name, k.alloc)
				i := find(k)
				if ok != (i >= 0) || ok && order != model[i].order {
					t.Fatalf("take(%v) = %d, %v; the model holds it at %d", k, order, ok, i)
				}
				if ok {
					model[i].live = false
				}
			}
			live := 0
			for _, e := range model {
				if e.live {
					live++
				}
			}
			if g.Len() != live {
				t.Fatalf("len = %d, the model holds %d", g.Len(), live)
			}
		}
	})
}

// TestGoneKeepsNoLargeRegistrationsStrings: a deregistered allocation's
// type, name and alloc ID are views into its string block (copyInto).
// gone keeps those views for a small registration, copying nothing, and
// copies them out of a large one's block, so that its entries never keep a
// deregistered plugin's options alive.
func TestGoneKeepsNoLargeRegistrationsStrings(t *testing.T) {
	g := NewOf(8)
	small := table.Copy(&messages.PluginInfo{Type: "csi-node", Name: "p", AllocId: "a1",
		Connection: &messages.ConnectionInfo{SocketPath: "/run/a1/csi.sock"}}).Info()
	require.Zero(t, testing.AllocsPerRun(1, func() { g.RememberPlugin(small, 1) }), "allocations remembering a small registration")
	require.Same(t, unsafe.StringData(small.GetName()), unsafe.StringData(goneEntryOf(t, g, "csi-node", "p", "a1").name))

	large := table.Copy(&messages.PluginInfo{Type: "csi-node", Name: "q", AllocId: "a2",
		Connection: &messages.ConnectionInfo{SocketPath: "/run/a2/csi.sock"},
		Options:    map[string]string{"k": strings.Repeat("v", viewsMax)}}).Info()
	g.RememberPlugin(large, 2)
	e := goneEntryOf(t, g, "csi-node", "q", "a2")
	require.Equal(t, [3]string{"csi-node", "q", "a2"}, [3]string{e.ptype, e.name, e.alloc})
	block := unsafe.StringData(large.GetType()) // the first string of the block
	for _, v := range []string{e.ptype, e.name, e.alloc} {
		at := uintptr(unsafe.Pointer(unsafe.StringData(v)))
		require.False(t, at >= uintptr(unsafe.Pointer(block)) && at < uintptr(unsafe.Pointer(block))+uintptr(table.StringBytes(large)),
			"gone keeps %q in the large registration's block", v)
	}
	order, ok := g.Take("csi-node", "q", "a2")
	require.True(t, ok)
	require.EqualValues(t, 2, order)
}

// goneEntryOf returns g's entry for (ptype, name, alloc).
func goneEntryOf(t *testing.T, g *Set, ptype, name, alloc string) entry {
	t.Helper()
	at, ok := g.find(g.hash(name, alloc), ptype, name, alloc)
	require.True(t, ok, "gone has no entry for (%s, %s, %s)", ptype, name, alloc)
	return g.ring[g.index(at)]
}
