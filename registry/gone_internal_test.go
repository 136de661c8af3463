package registry

import (
	"fmt"
	"testing"
)

// TestGoneRemembersTheNewestDeregistrationsAndForgetsTheOldestFirst: the
// order of a deregistered allocation is found by its type, name and alloc
// ID, once; past maxGone the oldest remembered goes first, and an
// allocation that differs in any one of the three is not found.
func TestGoneRemembersTheNewestDeregistrationsAndForgetsTheOldestFirst(t *testing.T) {
	g := newGone()
	g.remember("csi-node", "hp", "a1", 7)
	for _, k := range [][3]string{{"csi-other", "hp", "a1"}, {"csi-node", "hq", "a1"}, {"csi-node", "hp", "a2"}} {
		if _, ok := g.take(k[0], k[1], k[2]); ok {
			t.Fatalf("%v found, but only (csi-node, hp, a1) was remembered", k)
		}
	}
	if order, ok := g.take("csi-node", "hp", "a1"); !ok || order != 7 {
		t.Fatalf("take = %d, %v; want 7, true", order, ok)
	}
	if _, ok := g.take("csi-node", "hp", "a1"); ok {
		t.Fatal("taken twice: take must forget what it returns")
	}

	for i := range maxGone + 10 {
		g.remember("csi-node", "p", fmt.Sprint("a", i), uint64(i))
	}
	if g.len() != maxGone {
		t.Fatalf("holds %d, want the bound %d", g.len(), maxGone)
	}
	for i := range 10 {
		if _, ok := g.take("csi-node", "p", fmt.Sprint("a", i)); ok {
			t.Fatalf("a%d found: the oldest must go first", i)
		}
	}
	for _, i := range []int{10, maxGone / 2, maxGone + 9} {
		if order, ok := g.take("csi-node", "p", fmt.Sprint("a", i)); !ok || order != uint64(i) {
			t.Fatalf("a%d: take = %d, %v; want %d, true", i, order, ok, i)
		}
	}
	if g.len() != maxGone-3 {
		t.Fatalf("holds %d after three takes, want %d", g.len(), maxGone-3)
	}
}

// TestGoneKeysDoNotRunTogether: the three parts of a key are hashed apart,
// so ("ab", "c") and ("a", "bc") are two keys.
func TestGoneKeysDoNotRunTogether(t *testing.T) {
	g := newGone()
	g.remember("t", "ab", "c", 1)
	g.remember("t", "a", "bc", 2)
	if order, ok := g.take("t", "a", "bc"); !ok || order != 2 {
		t.Fatalf("take(a, bc) = %d, %v; want 2, true", order, ok)
	}
	if order, ok := g.take("t", "ab", "c"); !ok || order != 1 {
		t.Fatalf("take(ab, c) = %d, %v; want 1, true", order, ok)
	}
}
