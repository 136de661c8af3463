// Package gone remembers the order of recently deregistered allocations for
// the registry actor, so that an allocation registered again keeps its
// place in time.
package gone

import (
	"hash/maphash"
	"math/bits"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry/internal/table"
)

// Max bounds the deregistrations a Set remembers. Past it, the oldest goes.
const Max = 4096

// Set remembers the order of recently deregistered allocations. An
// allocation registered again, such as a discovered plugin back after an
// absence, then keeps its place in time. It never outranks an allocation
// registered after it first was. A Set is part of the registry actor's
// state: it is used only on the actor's goroutine, and not persisted.
//
// Every registration looks in it and every deregistration adds to it, so
// it is built for that:
//   - Entries live in a ring, so that the oldest goes first, in O(1).
//   - They are found through slots, an open-addressing table of their own.
//     One word per slot holds the ring index and the high bits of the
//     key's hash, so a probe reads no entry until a hash matches.
//   - Each entry knows its slot, so forgetting the oldest needs no search.
//
// Go's map keyed by a hash took three map operations a deregistration, and
// was a twentieth of a busy registry's CPU. The hash covers the name and
// the alloc ID. The type, which a node has few of, is compared on a match.
type Set struct {
	seed  maphash.Seed
	slots []uint64 // 0: empty; else the hash's high bits | ring index + 1
	mask  int      // len(slots) - 1, which also masks a slot's ring index + 1
	shift uint     // a hash's home slot is its top bits: hash >> shift
	ring  []entry  // grows to its capacity, then wraps
	next  int      // the entry the next remember takes once ring is full
	live  int      // entries remembered and not yet taken or forgotten
}

// entry is one remembered deregistration. An empty alloc marks a free
// entry: names.Check refuses an empty alloc ID at every registration and
// at load, so no remembered one is empty.
type entry struct {
	hash               uint64
	ptype, name, alloc string // alloc is "" once taken or forgotten
	order              uint64
	slot               int // where slots points at this entry
}

// New returns a Set that remembers up to Max deregistrations.
func New() *Set { return NewOf(Max) }

// NewOf returns a Set that remembers up to n deregistrations, n a
// power of two. It has twice as many slots, so probes stay short, and a
// slot's low bits (its ring index + 1, up to n) fit under the mask.
func NewOf(n int) *Set {
	return &Set{
		seed: maphash.MakeSeed(), slots: make([]uint64, 2*n), mask: 2*n - 1,
		shift: uint(64 - bits.Len(uint(2*n-1))), ring: make([]entry, 0, n),
	}
}

// hash is the hash of a key: its name and alloc ID, hashed apart.
func (g *Set) hash(name, alloc string) uint64 {
	const mix = 0x9e3779b97f4a7c15
	return maphash.String(g.seed, name)*mix ^ maphash.String(g.seed, alloc)
}

// Len is how many deregistrations the Set remembers now.
func (g *Set) Len() int { return g.live }

// Remember keeps order for the deregistered allocation (ptype, name, alloc),
// in place of any order it kept for it before.
func (g *Set) Remember(ptype, name, alloc string, order uint64) {
	h := g.hash(name, alloc)
	if at, ok := g.find(h, ptype, name, alloc); ok {
		g.forget(at)
	}
	i := len(g.ring)
	if i < cap(g.ring) {
		g.ring = append(g.ring, entry{})
	} else {
		i = g.next
		g.next = (g.next + 1) % cap(g.ring)
		if g.ring[i].alloc != "" {
			g.forget(g.ring[i].slot)
		}
	}
	g.ring[i] = entry{hash: h, ptype: ptype, name: name, alloc: alloc, order: order}
	g.put(i)
	g.live++
}

// viewsMax is the largest string block (see table.Copy) whose views a Set
// keeps as they are. A larger registration's type, name and alloc ID are
// copied out of it. A Set's entries then keep at most Max × viewsMax bytes
// of blocks alive (1 MiB), not every deregistered plugin's options.
const viewsMax = 256

// RememberPlugin is Remember for the registry's copy p of a deregistered
// allocation.
func (g *Set) RememberPlugin(p *messages.PluginInfo, order uint64) {
	ptype, name, alloc := p.GetType(), p.GetName(), p.GetAllocId()
	if table.StringBytes(p) > viewsMax {
		key := ptype + name + alloc
		ptype, name, alloc = key[:len(ptype)], key[len(ptype):len(ptype)+len(name)], key[len(ptype)+len(name):]
	}
	g.Remember(ptype, name, alloc, order)
}

// Take returns the order remembered for (ptype, name, alloc) and forgets
// it.
func (g *Set) Take(ptype, name, alloc string) (uint64, bool) {
	if g.live == 0 {
		return 0, false
	}
	at, ok := g.find(g.hash(name, alloc), ptype, name, alloc)
	if !ok {
		return 0, false
	}
	order := g.ring[g.index(at)].order
	g.forget(at)
	return order, true
}

// find returns the slot of the entry for the key with hash h.
func (g *Set) find(h uint64, ptype, name, alloc string) (int, bool) {
	for at := g.home(h); ; at = (at + 1) & g.mask {
		v := g.slots[at]
		if v == 0 {
			return 0, false
		}
		if v&^uint64(g.mask) != h&^uint64(g.mask) {
			continue
		}
		if e := &g.ring[int(v)&g.mask-1]; e.alloc == alloc && e.name == name && e.ptype == ptype {
			return at, true
		}
	}
}

// put points the first free slot of ring[i]'s probe sequence at it.
func (g *Set) put(i int) {
	e := &g.ring[i]
	at := g.home(e.hash)
	for g.slots[at] != 0 {
		at = (at + 1) & g.mask
	}
	g.slots[at] = e.hash&^uint64(g.mask) | uint64(i+1)
	e.slot = at
}

// forget empties slot at and clears its entry. The slots after it in the
// probe run move back where a probe would have found them first
// (backward-shift deletion), so no probe ever stops at a gap before its
// key.
func (g *Set) forget(at int) {
	g.ring[g.index(at)] = entry{}
	g.live--
	hole := at
	for at = (at + 1) & g.mask; g.slots[at] != 0; at = (at + 1) & g.mask {
		// The entry at at may fill the hole when its home is not in
		// (hole, at], cyclically: its probe passed the hole.
		if (at-g.home(g.slots[at]))&g.mask >= (at-hole)&g.mask {
			g.ring[g.index(at)].slot = hole
			g.slots[hole] = g.slots[at]
			hole = at
		}
	}
	g.slots[hole] = 0
}

// home is the first slot of the probe run of hash h, or of the entry a
// slot's word points at: the word keeps the hash's top bits.
func (g *Set) home(h uint64) int { return int(h >> g.shift) }

// index is the ring index of the entry slot at points at.
func (g *Set) index(at int) int { return int(g.slots[at])&g.mask - 1 }
