package table

import (
	"fmt"
	"slices"
	"testing"
)

// TestTypeTablesChangeOnlyTheirCopy: a batch's tables are a sorted copy
// with the changed types' clones in place and new types inserted in
// order; the snapshot they were copied from keeps what it had.
func TestTypeTablesChangeOnlyTheirCopy(t *testing.T) {
	working := NewWorking()
	working.Table("csi-node")
	working.Table("docker-volume")
	first := working.Freeze()
	kept := slices.Clone(first)

	for _, ptype := range []string{"csi-controller", "docker-volume"} {
		working.Changed(ptype, working.Table(ptype))
	}
	second := working.Cut(first)

	var types []string
	for _, tt := range second {
		types = append(types, tt.Type)
	}
	if want := []string{"csi-controller", "csi-node", "docker-volume"}; !slices.Equal(types, want) {
		t.Fatalf("types %v, want %v", types, want)
	}
	if !slices.Equal(first, kept) {
		t.Fatal("Cut changed the tables it was given: a snapshot's tables must never change")
	}
	if got, _ := second.Get("csi-node"); got != kept[0].Table {
		t.Fatal("an unchanged type must keep its frozen table")
	}
	if got, _ := second.Get("docker-volume"); got == kept[1].Table {
		t.Fatal("a changed type must get a fresh clone")
	}
	if _, ok := second.Get("csi-other"); ok {
		t.Fatal("a type never registered was found")
	}
	if third := working.Cut(second); !slices.Equal(third, second) {
		t.Fatal("a Cut with no change since the last one changed the tables")
	}
}

// TestTypeTablesFindEveryTypeWhetherScannedOrSearched: Get finds each
// type and no other, below scanTypes (a scan) and past it (a search).
func TestTypeTablesFindEveryTypeWhetherScannedOrSearched(t *testing.T) {
	for _, n := range []int{1, scanTypes, scanTypes + 1, 3 * scanTypes} {
		working := NewWorking()
		for i := range n {
			working.Table(fmt.Sprintf("type-%02d", i))
		}
		ts := working.Freeze()
		for _, tt := range ts {
			if got, ok := ts.Get(tt.Type); !ok || got != tt.Table {
				t.Fatalf("%d types: %s not found", n, tt.Type)
			}
		}
		for _, missing := range []string{"", "type-", "type-99", "a", "z"} {
			if _, ok := ts.Get(missing); ok {
				t.Fatalf("%d types: %q found, but there is no such type", n, missing)
			}
		}
	}
}
