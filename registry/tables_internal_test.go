package registry

import (
	"fmt"
	"slices"
	"testing"
)

// TestTypeTablesChangeOnlyTheirCopy: a batch's tables are a sorted copy
// with the changed types' clones in place and new types inserted in
// order; the snapshot they were copied from keeps what it had.
func TestTypeTablesChangeOnlyTheirCopy(t *testing.T) {
	working := map[string]*pluginTable{"csi-node": newPluginTable(), "docker-volume": newPluginTable()}
	first := tablesOf(working)
	kept := slices.Clone(first)

	working["csi-controller"] = newPluginTable()
	second := first.with(typeTables{{"csi-controller", working["csi-controller"]}, {"docker-volume", working["docker-volume"]}})

	var types []string
	for _, tt := range second {
		types = append(types, tt.ptype)
	}
	if want := []string{"csi-controller", "csi-node", "docker-volume"}; !slices.Equal(types, want) {
		t.Fatalf("types %v, want %v", types, want)
	}
	if !slices.Equal(first, kept) {
		t.Fatal("with changed the tables it was called on: a snapshot's tables must never change")
	}
	if got, _ := second.get("csi-node"); got != kept[0].table {
		t.Fatal("an unchanged type must keep its frozen table")
	}
	if got, _ := second.get("docker-volume"); got == kept[1].table {
		t.Fatal("a changed type must get a fresh clone")
	}
	if _, ok := second.get("csi-other"); ok {
		t.Fatal("a type never registered was found")
	}
}

// TestTypeTablesFindEveryTypeWhetherScannedOrSearched: get finds each
// type and no other, below scanTypes (a scan) and past it (a search).
func TestTypeTablesFindEveryTypeWhetherScannedOrSearched(t *testing.T) {
	for _, n := range []int{1, scanTypes, scanTypes + 1, 3 * scanTypes} {
		working := map[string]*pluginTable{}
		for i := range n {
			working[fmt.Sprintf("type-%02d", i)] = newPluginTable()
		}
		ts := tablesOf(working)
		for _, tt := range ts {
			if got, ok := ts.get(tt.ptype); !ok || got != tt.table {
				t.Fatalf("%d types: %s not found", n, tt.ptype)
			}
		}
		for _, missing := range []string{"", "type-", "type-99", "a", "z"} {
			if _, ok := ts.get(missing); ok {
				t.Fatalf("%d types: %q found, but there is no such type", n, missing)
			}
		}
	}
}
