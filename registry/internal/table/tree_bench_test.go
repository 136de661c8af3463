package table

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/btree"
)

// benchTree is what the tree benchmarks ask of allocTree and of
// google/btree, which the registry used before it.
type benchTree interface {
	put(a *Allocation)
	remove(a *Allocation)
	clone() benchTree
}

type ownTree struct{ *allocTree }

func (t ownTree) put(a *Allocation)    { t.ReplaceOrInsert(a) }
func (t ownTree) remove(a *Allocation) { t.Delete(a) }
func (t ownTree) clone() benchTree     { return ownTree{t.Clone()} }

type googleTree struct{ *btree.BTreeG[*Allocation] }

func (t googleTree) put(a *Allocation)    { t.ReplaceOrInsert(a) }
func (t googleTree) remove(a *Allocation) { t.Delete(a) }
func (t googleTree) clone() benchTree     { return googleTree{t.Clone()} }

// BenchmarkAllocTree compares allocTree's node sizes with google/btree at
// degree 16 (what the registry had), on items allocations in random
// order: the live heap per item once all are in (B/item), the CPU of
// inserting them (ns/insert), of deleting them (ns/delete), and of a
// replace after a clone, as the registry writes after a snapshot cut
// (ns/write-after-clone).
func BenchmarkAllocTree(b *testing.B) {
	kinds := []struct {
		name string
		make func() benchTree
	}{
		{"btree-degree16", func() benchTree {
			return googleTree{btree.NewG(16, func(a, b *Allocation) bool { return compareAlloc(a, b) < 0 })}
		}},
	}
	for _, max := range []int{31, 63, treeMaxItems} {
		kinds = append(kinds, struct {
			name string
			make func() benchTree
		}{fmt.Sprint("max", max), func() benchTree {
			t := newAllocTree(compareAlloc)
			t.maxItems = max
			return ownTree{t}
		}})
	}
	for _, n := range []int{10000, 100000} {
		for _, order := range []string{"random", "registered"} {
			// registered is MemoryPerPlugin's order: p0, p1, p2 and on.
			items := make([]*Allocation, n)
			for i := range items {
				items[i] = probe(fmt.Sprint("p", i), "a0")
			}
			if order == "random" {
				rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { items[i], items[j] = items[j], items[i] })
			}
			for _, kind := range kinds {
				b.Run(fmt.Sprintf("items=%d/order=%s/%s", n, order, kind.name), func(b *testing.B) {
					benchTreeOps(b, kind.make, items)
				})
			}
		}
	}
}

func benchTreeOps(b *testing.B, make func() benchTree, items []*Allocation) {
	n := float64(len(items))
	before := liveHeap()
	tree := make()
	for _, a := range items {
		tree.put(a)
	}
	perItem := float64(liveHeap()-before) / n
	var inserts, deletes, writes float64
	for b.Loop() {
		b.StopTimer()
		fresh := make()
		b.StartTimer()
		start := time.Now().UnixNano()
		for _, a := range items {
			fresh.put(a)
		}
		mid := time.Now().UnixNano()
		for _, a := range items {
			fresh.remove(a)
		}
		end := time.Now().UnixNano()
		for i := range 1000 {
			tree = tree.clone()
			tree.put(items[i*7%len(items)])
		}
		inserts += float64(mid - start)
		deletes += float64(end - mid)
		writes += float64(time.Now().UnixNano() - end)
	}
	b.ReportMetric(inserts/float64(b.N)/n, "ns/insert")
	b.ReportMetric(deletes/float64(b.N)/n, "ns/delete")
	b.ReportMetric(writes/float64(b.N)/1000, "ns/write-after-clone")
	b.ReportMetric(perItem, "B/item") // after the loop, which clears metrics
	b.ReportMetric(0, "ns/op")
}
