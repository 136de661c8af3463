package table

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"weak"

	"pgregory.net/rapid"
)

// treeModel is the reference for allocTree: a sorted slice.
type treeModel []*Allocation

func (m treeModel) find(key *Allocation) (int, bool) {
	return slices.BinarySearchFunc(m, key, compareAlloc)
}

func (m treeModel) clone() treeModel { return slices.Clone(m) }

// treeMachine drives an allocTree and its model through random writes,
// reads and clones: names and alloc IDs from small sets, so that replaces
// and deletes hit held keys often.
type treeMachine struct {
	tree   *allocTree
	model  treeModel
	clones []*allocTree
	frozen []treeModel // the model as it was at each clone
}

func (m *treeMachine) key(t *rapid.T) *Allocation {
	name := fmt.Sprint("p", rapid.IntRange(0, 400).Draw(t, "name"))
	alloc := fmt.Sprint("a", rapid.IntRange(0, 3).Draw(t, "alloc"))
	a := probe(name, alloc)
	a.ord = rapid.Uint64Range(0, MaxSequence).Draw(t, "order")
	return a
}

func (m *treeMachine) Insert(t *rapid.T) {
	// Runs of inserts, so that the tree grows past one level.
	for range rapid.IntRange(1, 40).Draw(t, "run") {
		a := m.key(t)
		old, replaced := m.tree.ReplaceOrInsert(a)
		i, found := m.model.find(a)
		if found != replaced || found && old != m.model[i] {
			t.Fatalf("ReplaceOrInsert(%s/%s) = %v, %v; model holds it: %v", a.plugin.Name, a.plugin.AllocId, old, replaced, found)
		}
		if found {
			m.model[i] = a
		} else {
			m.model = slices.Insert(m.model, i, a)
		}
	}
}

func (m *treeMachine) Delete(t *rapid.T) {
	for range rapid.IntRange(1, 40).Draw(t, "run") {
		key := m.key(t)
		if len(m.model) > 0 && rapid.Bool().Draw(t, "held") {
			held := m.model[rapid.IntRange(0, len(m.model)-1).Draw(t, "index")]
			key = probe(held.plugin.Name, held.plugin.AllocId)
		}
		old, deleted := m.tree.Delete(key)
		i, found := m.model.find(key)
		if found != deleted || found && old != m.model[i] {
			t.Fatalf("Delete(%s/%s) = %v, %v; model holds it: %v", key.plugin.Name, key.plugin.AllocId, old, deleted, found)
		}
		if found {
			m.model = slices.Delete(m.model, i, i+1)
		}
	}
}

func (m *treeMachine) Get(t *rapid.T) {
	key := m.key(t)
	got, ok := m.tree.Get(key)
	i, found := m.model.find(key)
	if ok != found || found && got != m.model[i] {
		t.Fatalf("Get(%s/%s) = %v, %v; model holds it: %v", key.plugin.Name, key.plugin.AllocId, got, ok, found)
	}
}

func (m *treeMachine) Ascend(t *rapid.T) {
	key := m.key(t)
	limit := rapid.IntRange(1, 50).Draw(t, "limit")
	var got []*Allocation
	m.tree.AscendGreaterOrEqual(key, func(a *Allocation) bool {
		got = append(got, a)
		return len(got) < limit
	})
	i, _ := m.model.find(key)
	want := m.model[i:]
	if len(want) > limit {
		want = want[:limit]
	}
	if !slices.Equal(got, want) {
		t.Fatalf("AscendGreaterOrEqual(%s/%s) with limit %d: got %d items, want %d", key.plugin.Name, key.plugin.AllocId, limit, len(got), len(want))
	}
}

func (m *treeMachine) Clone(t *rapid.T) {
	c := m.tree.Clone()
	if rapid.Bool().Draw(t, "keep the clone as the working tree") {
		m.tree, c = c, m.tree
	}
	m.clones = append(m.clones, c)
	m.frozen = append(m.frozen, m.model.clone())
}

// Check compares the tree and every clone with their models, in full, and
// checks the tree's shape.
func (m *treeMachine) Check(t *rapid.T) {
	checkTree(t, m.tree, m.model)
	for i, c := range m.clones {
		checkTree(t, c, m.frozen[i])
	}
}

func checkTree(t *rapid.T, tree *allocTree, want treeModel) {
	t.Helper()
	if tree.Len() != len(want) {
		t.Fatalf("Len() = %d, want %d", tree.Len(), len(want))
	}
	var got []*Allocation
	tree.AscendGreaterOrEqual(probe("", ""), func(a *Allocation) bool {
		got = append(got, a)
		return true
	})
	if !slices.Equal(got, want) {
		t.Fatalf("the tree holds %d items out of order or not the model's %d", len(got), len(want))
	}
	if err := tree.check(); err != nil {
		t.Fatal(err)
	}
}

// TestAllocTreeAgainstModel: random inserts, replaces, deletes, lookups
// and ascents from random keys give what a sorted slice gives, every node
// keeps the B-tree's shape (bounds, equal depth, slices sized to their
// contents, nothing stale past their length), and every clone keeps the
// contents it had when it was taken, whatever is written to the tree after.
func TestAllocTreeAgainstModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tree := newAllocTree(compareAlloc)
		// Small nodes make trees of a few hundred items three and four
		// levels deep, where every way of rebalancing is taken.
		tree.maxItems = rapid.SampledFrom([]int{3, 4, 5, 8, treeMaxItems}).Draw(t, "maxItems")
		t.Repeat(rapid.StateMachineActions(&treeMachine{tree: tree}))
	})
}

// TestAllocTreeShrinks: a tree that grew to thousands of items and shrank
// to a few keeps a few nodes, not the levels it had.
func TestAllocTreeShrinks(t *testing.T) {
	tree := newAllocTree(compareAlloc)
	held := fillTree(tree, 5000)
	snapshot := tree.Clone()
	for _, a := range held[:4990] {
		if _, ok := tree.Delete(a); !ok {
			t.Fatalf("Delete(%s) found nothing", a.plugin.Name)
		}
	}
	if err := tree.check(); err != nil {
		t.Fatal(err)
	}
	if n := tree.root.count(); n != 1 {
		t.Fatalf("10 items left in %d nodes, want 1", n)
	}
	if snapshot.Len() != 5000 || snapshot.check() != nil {
		t.Fatalf("the clone changed: %d items, %v", snapshot.Len(), snapshot.check())
	}
}

// TestAllocTreeDeleteOfAMissingKeyCopiesNoNode: after a clone, deleting a
// key the tree does not hold leaves it sharing every node with the clone.
func TestAllocTreeDeleteOfAMissingKeyCopiesNoNode(t *testing.T) {
	tree := newAllocTree(compareAlloc)
	tree.maxItems = 4 // several levels deep
	fillTree(tree, 100)
	snapshot := tree.Clone()
	for _, name := range []string{"p", "p0050x", "q"} { // before, among, after
		if _, ok := tree.Delete(probe(name, "a0")); ok {
			t.Fatalf("Delete(%s) found an item the tree never held", name)
		}
	}
	if tree.root != snapshot.root {
		t.Fatal("a delete that found nothing copied the root")
	}
}

// fillTree inserts n allocations, p0000 a0 and on, into tree, and returns them.
func fillTree(tree *allocTree, n int) []*Allocation {
	items := make([]*Allocation, n)
	for i := range items {
		items[i] = probe(fmt.Sprintf("p%04d", i), "a0")
		tree.ReplaceOrInsert(items[i])
	}
	return items
}

// TestAllocTreeCloneReadWhileWritten: readers on other goroutines walk a
// clone while the tree it was taken from is written (inserts, replaces,
// deletes that merge nodes), and always find the clone's contents; -race
// finds any node both share that the writer changes.
func TestAllocTreeCloneReadWhileWritten(t *testing.T) {
	tree := newAllocTree(compareAlloc)
	tree.maxItems = 4 // deep, so that writes split and merge at every level
	want := fillTree(tree, 500)
	clone := tree.Clone()
	done := make(chan error)
	for range 2 {
		go func() {
			for range 20 {
				var got []*Allocation
				clone.AscendGreaterOrEqual(probe("", ""), func(a *Allocation) bool {
					got = append(got, a)
					return true
				})
				if !slices.Equal(got, want) {
					done <- fmt.Errorf("a reader of the clone found %d items, want %d", len(got), len(want))
					return
				}
			}
			done <- nil
		}()
	}
	for i := range 500 {
		tree.Delete(want[i])
		tree.ReplaceOrInsert(probe(fmt.Sprintf("p%04d", 499-i), "a1"))
		tree.ReplaceOrInsert(probe(fmt.Sprintf("p%04d", i), "a0"))
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if err := clone.check(); err != nil {
		t.Fatal(err)
	}
}

// TestAllocTreeKeepsNoDeletedAllocation: once deleted (and with no clone
// holding them), no allocation stays reachable from the tree, neither
// from a leaf's slice past its length nor from an inner node.
func TestAllocTreeKeepsNoDeletedAllocation(t *testing.T) {
	tree := newAllocTree(compareAlloc)
	tree.maxItems = 5
	var deleted []weak.Pointer[Allocation]
	for i := range 1000 {
		a := probe(fmt.Sprint("p", i), "a0")
		tree.ReplaceOrInsert(a)
		if i%10 != 0 {
			deleted = append(deleted, weak.Make(a))
		}
	}
	for i := range 1000 {
		if i%10 != 0 {
			tree.Delete(probe(fmt.Sprint("p", i), "a0"))
		}
	}
	runtime.GC()
	for _, w := range deleted {
		if a := w.Value(); a != nil {
			t.Fatalf("%s/%s is still reachable after its delete", a.plugin.Name, a.plugin.AllocId)
		}
	}
	if tree.Len() != 100 || tree.check() != nil {
		t.Fatalf("%d items left, want 100: %v", tree.Len(), tree.check())
	}
}

// TestAllocTreeHeapPerItem: 10,000 items inserted in random order cost at
// most 11 bytes each beyond the allocations themselves (a pointer each and
// the nodes' share), where google/btree's half-empty nodes cost 16 to 29.
func TestAllocTreeHeapPerItem(t *testing.T) {
	const n = 10000
	items := make([]*Allocation, n)
	for i := range items {
		items[i] = probe(fmt.Sprint("p", i), "a0")
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { items[i], items[j] = items[j], items[i] })
	// The tree's garbage (slices outgrown on the way) is collected before
	// each reading; only what the tree holds stays.
	before := liveHeap()
	tree := newAllocTree(compareAlloc)
	for _, a := range items {
		tree.ReplaceOrInsert(a)
	}
	after := liveHeap()
	perItem := float64(after-before) / n
	t.Logf("%.2f bytes per item", perItem)
	if perItem > 11 {
		t.Errorf("the tree holds %.2f bytes per item, want at most 11", perItem)
	}
	runtime.KeepAlive(tree)
	runtime.KeepAlive(items)
}

func liveHeap() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// check reports a node out of the B-tree's bounds, a leaf at another
// depth, an item out of order within a node, a slice with more capacity
// than one size class above its length or a stale item past its length,
// or a Len that is not the count of items.
func (t *allocTree) check() error {
	if t.root == nil {
		if t.length != 0 {
			return fmt.Errorf("empty tree with Len %d", t.length)
		}
		return nil
	}
	count, leafDepth := 0, -1
	var walk func(n *treeNode, depth int) error
	walk = func(n *treeNode, depth int) error {
		count += len(n.items)
		if len(n.items) > t.maxItems || n != t.root && len(n.items) < t.minItems() || len(n.items) == 0 {
			return fmt.Errorf("a node at depth %d holds %d items", depth, len(n.items))
		}
		if cap(n.items) > classCap[classCap[len(n.items)]+1] {
			return fmt.Errorf("a node holds %d items in a slice of %d", len(n.items), cap(n.items))
		}
		for _, a := range n.items[len(n.items):cap(n.items)] {
			if a != nil {
				return fmt.Errorf("a node keeps %s/%s past its items", a.plugin.Name, a.plugin.AllocId)
			}
		}
		for i := 1; i < len(n.items); i++ {
			if t.compare(n.items[i-1], n.items[i]) >= 0 {
				return fmt.Errorf("a node's items %d and %d are out of order", i-1, i)
			}
		}
		if n.children == nil {
			if leafDepth >= 0 && depth != leafDepth {
				return fmt.Errorf("leaves at depths %d and %d", leafDepth, depth)
			}
			leafDepth = depth
			return nil
		}
		if len(n.children) != len(n.items)+1 || cap(n.children) > classCap[classCap[len(n.children)]+1] {
			return fmt.Errorf("a node of %d items has %d children in a slice of %d", len(n.items), len(n.children), cap(n.children))
		}
		for _, c := range n.children[len(n.children):cap(n.children)] {
			if c != nil {
				return fmt.Errorf("a node keeps a child past its children")
			}
		}
		for _, c := range n.children {
			if err := walk(c, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(t.root, 0); err != nil {
		return err
	}
	if count != t.length {
		return fmt.Errorf("Len() = %d, the nodes hold %d", t.length, count)
	}
	return nil
}

// count is how many nodes n's subtree has.
func (n *treeNode) count() int {
	total := 1
	for _, c := range n.children {
		total += c.count()
	}
	return total
}
