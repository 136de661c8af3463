package table

import (
	"slices"
	"strings"
)

// treeMaxItems is the most allocations a node of an allocTree holds; a
// node other than the root holds at least half as many, rounded down.
// Measured at 10,000 and 100,000 allocations against 31, 63 and 255
// (BenchmarkAllocTree; BENCHMARKS.md, "the (name, alloc) tree"): larger
// nodes share their fixed cost among more items, down to 9.1-9.4 bytes an
// item here from 10-12 at 63 and 31, and cost more to copy on the first
// change after a clone; 255 saved at most half a byte more.
const treeMaxItems = 127

// allocTree is a persistent B-tree of allocations in the order of
// compare, whose nodes hold slices sized to their contents: a slice that
// outgrows its capacity, or shrinks more than a size class below it, is
// copied into one whose capacity is its length rounded up to the Go size
// class (see sized), so that an item costs its pointer plus a share of its
// node, where google/btree's nodes keep the capacity they had when full
// and are half empty after a split.
//
// Clone is O(1): the two trees share every node, and each copies a node
// the first time it changes it (copy on write, the nodes it owns are the
// ones marked with its owner). A node reachable from a clone is never
// changed again, so a clone can be read from any number of goroutines
// while the tree it was taken from is written.
type allocTree struct {
	root    *treeNode
	length  int
	compare func(a, b *Allocation) int
	owner   *treeOwner
	// maxItems is treeMaxItems, or less (at least 2, or a split would
	// leave an empty node) in tests that need deep trees.
	maxItems int
}

// treeOwner marks the nodes a tree may change in place. It is not empty,
// so that each is a distinct pointer.
type treeOwner struct{ _ byte }

// treeNode is a node of an allocTree: a leaf when children is nil, else
// with one child more than items, children[i] holding the allocations
// before items[i].
type treeNode struct {
	items    []*Allocation
	children []*treeNode
	owner    *treeOwner
}

// newAllocTree returns an empty tree ordered by compare.
func newAllocTree(compare func(a, b *Allocation) int) *allocTree {
	return &allocTree{compare: compare, owner: new(treeOwner), maxItems: treeMaxItems}
}

// Len is how many allocations the tree holds.
func (t *allocTree) Len() int { return t.length }

// Clone returns a tree with t's allocations. Neither ever sees the other's
// later changes: both take a new owner, so every node they share is
// copied before either changes it. Clone so writes t: call it where t may
// be written (a frozen tree's owner is read by no reader).
func (t *allocTree) Clone() *allocTree {
	t.owner = new(treeOwner)
	return &allocTree{root: t.root, length: t.length, compare: t.compare, owner: new(treeOwner), maxItems: t.maxItems}
}

// Get returns the allocation equal to key.
func (t *allocTree) Get(key *Allocation) (*Allocation, bool) {
	n := t.root
	for n != nil {
		i, found := slices.BinarySearchFunc(n.items, key, t.compare)
		if found {
			return n.items[i], true
		}
		if n.children == nil {
			break
		}
		n = n.children[i]
	}
	return nil, false
}

// AscendGreaterOrEqual calls fn with each allocation from pivot on, in
// order, until fn returns false.
func (t *allocTree) AscendGreaterOrEqual(pivot *Allocation, fn func(*Allocation) bool) {
	if t.root != nil {
		t.root.ascend(pivot, t.compare, fn)
	}
}

// Ascend calls fn with each allocation, in order, until fn returns false.
func (t *allocTree) Ascend(fn func(*Allocation) bool) {
	if t.root != nil {
		t.root.ascend(nil, t.compare, fn)
	}
}

// ascend calls fn with the allocations of n's subtree from pivot on (all
// of them when pivot is nil), and returns false once fn has.
func (n *treeNode) ascend(pivot *Allocation, compare func(a, b *Allocation) int, fn func(*Allocation) bool) bool {
	start, found := 0, false
	if pivot != nil {
		start, found = slices.BinarySearchFunc(n.items, pivot, compare)
	}
	for i := start; i <= len(n.items); i++ {
		// children[start] holds only allocations before pivot when
		// items[start] is pivot's equal.
		if n.children != nil && (i > start || !found) {
			from := pivot
			if i > start {
				from = nil
			}
			if !n.children[i].ascend(from, compare, fn) {
				return false
			}
		}
		if i < len(n.items) && !fn(n.items[i]) {
			return false
		}
	}
	return true
}

// ReplaceOrInsert puts a in the tree, replacing the allocation equal to
// it, which it returns.
func (t *allocTree) ReplaceOrInsert(a *Allocation) (old *Allocation, replaced bool) {
	if t.root == nil {
		t.root = &treeNode{items: []*Allocation{a}, owner: t.owner}
		t.length++
		return nil, false
	}
	t.root = t.own(t.root)
	old, replaced = t.insert(t.root, a)
	if len(t.root.items) > t.maxItems {
		median, right := t.split(t.root)
		t.root = &treeNode{items: []*Allocation{median}, children: []*treeNode{t.root, right}, owner: t.owner}
	}
	if !replaced {
		t.length++
	}
	return old, replaced
}

// insert puts a in the subtree of n, which t owns. A node it grows may
// hold one item too many: n's parent splits it.
func (t *allocTree) insert(n *treeNode, a *Allocation) (*Allocation, bool) {
	i, found := slices.BinarySearchFunc(n.items, a, t.compare)
	if found {
		old := n.items[i]
		n.items[i] = a
		return old, true
	}
	if n.children == nil {
		n.items = insertAt(n.items, i, a)
		return nil, false
	}
	child := t.ownChild(n, i)
	old, replaced := t.insert(child, a)
	if len(child.items) > t.maxItems {
		median, right := t.split(child)
		n.items = insertAt(n.items, i, median)
		n.children = insertAt(n.children, i+1, right)
	}
	return old, replaced
}

// split cuts n, which holds one item too many, in two: n keeps the first
// half, and split returns the median and a new node with the second.
func (t *allocTree) split(n *treeNode) (median *Allocation, right *treeNode) {
	mid := len(n.items) / 2
	median = n.items[mid]
	right = &treeNode{items: sizedCopy(n.items[mid+1:]), owner: t.owner}
	n.items = sizedCopy(n.items[:mid])
	if n.children != nil {
		right.children = sizedCopy(n.children[mid+1:])
		n.children = sizedCopy(n.children[:mid+1])
	}
	return median, right
}

// Delete removes the allocation equal to key, and returns it. A key the
// tree does not hold copies no node.
func (t *allocTree) Delete(key *Allocation) (*Allocation, bool) {
	if t.root == nil {
		return nil, false
	}
	root, old, ok := t.remove(t.root, key)
	if !ok {
		return nil, false
	}
	t.root = root
	if len(root.items) == 0 {
		if root.children == nil {
			t.root = nil
		} else {
			t.root = root.children[0] // its two children were merged
		}
	}
	t.length--
	return old, true
}

// remove deletes key from the subtree of n, and returns the subtree's
// root: n, or t's copy of n once remove has found key below it. A child
// left with too few items borrows from a sibling or is merged with one
// (rebalance), so n may be left with too few: its parent's turn.
func (t *allocTree) remove(n *treeNode, key *Allocation) (*treeNode, *Allocation, bool) {
	i, found := slices.BinarySearchFunc(n.items, key, t.compare)
	var old *Allocation
	switch {
	case n.children == nil && !found:
		return n, nil, false
	case n.children == nil:
		n = t.own(n)
		old = n.items[i]
		n.items = removeAt(n.items, i)
		return n, old, true
	case found:
		// The last allocation before it, from a leaf, takes its place.
		n = t.own(n)
		old = n.items[i]
		n.items[i] = t.removeLast(t.ownChild(n, i))
	default:
		child, removed, ok := t.remove(n.children[i], key)
		if !ok {
			return n, nil, false
		}
		n, old = t.own(n), removed
		n.children[i] = child
	}
	t.rebalance(n, i)
	return n, old, true
}

// removeLast deletes the last allocation of n's subtree, and returns it.
func (t *allocTree) removeLast(n *treeNode) *Allocation {
	if n.children == nil {
		last := n.items[len(n.items)-1]
		n.items = removeAt(n.items, len(n.items)-1)
		return last
	}
	i := len(n.children) - 1
	last := t.removeLast(t.ownChild(n, i))
	t.rebalance(n, i)
	return last
}

// minItems is the fewest items a node other than the root holds.
func (t *allocTree) minItems() int { return t.maxItems / 2 }

// rebalance gives n's child i at least minItems; t owns both n and the
// child. It
// moves one through n from a sibling that can spare one, or else merges
// the child with a sibling.
func (t *allocTree) rebalance(n *treeNode, i int) {
	child := n.children[i]
	if len(child.items) >= t.minItems() {
		return
	}
	switch {
	case i > 0 && len(n.children[i-1].items) > t.minItems():
		left := t.ownChild(n, i-1)
		last := len(left.items) - 1
		child.items = insertAt(child.items, 0, n.items[i-1])
		n.items[i-1] = left.items[last]
		left.items = removeAt(left.items, last)
		if child.children != nil {
			child.children = insertAt(child.children, 0, left.children[last+1])
			left.children = removeAt(left.children, last+1)
		}
	case i+1 < len(n.children) && len(n.children[i+1].items) > t.minItems():
		right := t.ownChild(n, i+1)
		child.items = insertAt(child.items, len(child.items), n.items[i])
		n.items[i] = right.items[0]
		right.items = removeAt(right.items, 0)
		if child.children != nil {
			child.children = insertAt(child.children, len(child.children), right.children[0])
			right.children = removeAt(right.children, 0)
		}
	case i+1 < len(n.children):
		t.merge(n, i)
	default:
		t.merge(n, i-1)
	}
}

// merge joins n's children i and i+1, and the item between them, into
// child i. Neither child holds more than minItems, so the join fits.
func (t *allocTree) merge(n *treeNode, i int) {
	left, right := t.ownChild(n, i), n.children[i+1]
	items := sized[*Allocation](len(left.items) + 1 + len(right.items))
	at := copy(items, left.items)
	items[at] = n.items[i]
	copy(items[at+1:], right.items)
	left.items = items
	if left.children != nil {
		left.children = slices.Concat(left.children, right.children)
	}
	n.items = removeAt(n.items, i)
	n.children = removeAt(n.children, i+1)
}

// own returns n if t owns it, else t's copy of it, with room for one
// item more: most copies are made to insert one.
func (t *allocTree) own(n *treeNode) *treeNode {
	if n.owner == t.owner {
		return n
	}
	items := sized[*Allocation](len(n.items) + 1)[:len(n.items)]
	copy(items, n.items)
	c := &treeNode{items: items, owner: t.owner}
	if n.children != nil {
		c.children = sizedCopy(n.children)
	}
	return c
}

// ownChild is own for n's child i, which it replaces with t's copy.
func (t *allocTree) ownChild(n *treeNode, i int) *treeNode {
	c := t.own(n.children[i])
	n.children[i] = c
	return c
}

// pointers is what a node's slices hold.
type pointers interface{ *Allocation | *treeNode }

// sized returns a slice of length n whose capacity fills its allocation:
// n rounded up to the Go size class, as append rounds it.
func sized[T pointers](n int) []T { return append([]T(nil), make([]T, n)...) }

// sizedCopy returns a copy of s from sized.
func sizedCopy[T pointers](s []T) []T {
	out := sized[T](len(s))
	copy(out, s)
	return out
}

// insertAt inserts v at i, in place when s has room, or else into a copy
// from sized: one more item, so capacity grows by a size class at most.
func insertAt[T pointers](s []T, i int, v T) []T {
	if len(s) < cap(s) {
		return slices.Insert(s, i, v)
	}
	out := sized[T](len(s) + 1)
	copy(out, s[:i])
	out[i] = v
	copy(out[i+1:], s[i:])
	return out
}

// removeAt removes the item at i, clearing the slot it frees so that no
// deleted allocation stays reachable, and copies the rest into a slice
// from sized once its capacity is more than one size class too large.
func removeAt[T pointers](s []T, i int) []T {
	s = slices.Delete(s, i, i+1)
	if cap(s) > classCap[classCap[len(s)]+1] {
		s = sizedCopy(s)
	}
	return s
}

// classCap[n] is the capacity sized gives n items: for every length a
// node's slice can have, and for the length just past each one's size
// class (removeAt's bound).
var classCap = func() (caps [2*treeMaxItems + 4]int) {
	for n := range caps {
		caps[n] = n
		if n > 0 && n <= caps[n-1] {
			caps[n] = caps[n-1] // the same size class: no slice to make
		} else if n > 0 {
			caps[n] = cap(sized[*Allocation](n))
		}
	}
	return caps
}()

// compareAlloc orders allocations by name, then alloc ID: the order of a
// table's allocs tree.
func compareAlloc(a, b *Allocation) int {
	if c := strings.Compare(a.plugin.Name, b.plugin.Name); c != 0 {
		return c
	}
	return strings.Compare(a.plugin.AllocId, b.plugin.AllocId)
}
