package registry

import "hash/maphash"

// maxGone bounds the deregistrations a gone remembers: past it, the
// oldest goes.
const maxGone = 4096

// gone remembers the order of recently deregistered allocations, so that
// one registered again (a discovered plugin back after an absence) keeps
// its place in time and never outranks an allocation registered after it
// first was. It is part of the registry actor's state, used only on its
// goroutine, and not persisted.
//
// Every registration looks in it and every deregistration adds to it, so
// it is built for that: the key's three strings are hashed once into a
// uint64, the map is keyed by that (a map of three-string keys hashed and
// compared all three on every operation, and evicted an arbitrary entry by
// starting an iteration: a tenth of a busy registry's CPU), and entries
// live in a ring, so that the oldest goes first in O(1). A hash that two
// keys share is told apart by the strings kept in the ring: the older of
// the two is then forgotten early, which costs it only its place in time.
type gone struct {
	seed  maphash.Seed
	index map[uint64]int32 // hash → slot in ring
	ring  []goneEntry      // grows to maxGone, then wraps
	next  int32            // the slot the next entry takes once ring is full
}

type goneEntry struct {
	hash               uint64
	ptype, name, alloc string
	order              uint64
}

func newGone() *gone {
	return &gone{seed: maphash.MakeSeed(), index: map[uint64]int32{}}
}

func (g *gone) hash(ptype, name, alloc string) uint64 {
	const mix = 0x9e3779b97f4a7c15
	h := maphash.String(g.seed, ptype)
	h = h*mix ^ maphash.String(g.seed, name)
	return h*mix ^ maphash.String(g.seed, alloc)
}

func (g *gone) len() int { return len(g.index) }

// remember keeps order for the deregistered allocation (ptype, name, alloc).
func (g *gone) remember(ptype, name, alloc string, order uint64) {
	e := goneEntry{hash: g.hash(ptype, name, alloc), ptype: ptype, name: name, alloc: alloc, order: order}
	if len(g.ring) < maxGone {
		g.index[e.hash] = int32(len(g.ring))
		g.ring = append(g.ring, e)
		return
	}
	slot := g.next
	g.next = (g.next + 1) % maxGone
	if old := g.ring[slot]; old.alloc != "" {
		if at, ok := g.index[old.hash]; ok && at == slot {
			delete(g.index, old.hash)
		}
	}
	g.ring[slot] = e
	g.index[e.hash] = slot
}

// take returns the order remembered for (ptype, name, alloc) and forgets
// it.
func (g *gone) take(ptype, name, alloc string) (uint64, bool) {
	if len(g.index) == 0 {
		return 0, false
	}
	h := g.hash(ptype, name, alloc)
	slot, ok := g.index[h]
	if !ok {
		return 0, false
	}
	e := &g.ring[slot]
	if e.ptype != ptype || e.name != name || e.alloc != alloc {
		return 0, false
	}
	delete(g.index, h)
	order := e.order
	*e = goneEntry{}
	return order, true
}
