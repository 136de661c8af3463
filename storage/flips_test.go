package storage_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/storage"
	"github.com/plugvisor/plugvisor/storage/storagetest"
)

// TestBoltNeverFaultsOnAFlippedBitInAnyPageKind flips bits in every kind of
// page of a file with branch pages (issue 23: a flipped bit in a branch
// element's pos crashed the process inside bbolt). Each open either refuses
// the file as corrupt, naming the flag, which then moves it aside, or serves
// exactly the records written.
func TestBoltNeverFaultsOnAFlippedBitInAnyPageKind(t *testing.T) {
	orig := multiLevelFile(t)
	want := digest(load(t, bucket(t, openCopy(t, orig), "registry")))
	flips, err := storagetest.PageFlips(orig, 8, rand.New(rand.NewPCG(23, 4)))
	require.NoError(t, err)
	refused := map[string]int{}
	for _, f := range flips {
		path := filepath.Join(t.TempDir(), "state.db")
		writeFile(t, path, f.Apply(orig))
		s, err := storage.OpenBolt(path, storage.BoltOptions{})
		if err == nil {
			require.Equal(t, want, digest(load(t, bucket(t, s, "registry"))), "%v: the file opened, and serves what was written", f)
			require.NoError(t, s.Close())
			continue
		}
		refused[f.Kind]++
		require.ErrorIs(t, err, storage.ErrCorrupt, f.String())
		require.ErrorContains(t, err, "-reset-corrupt-state", f.String())
		s, err = storage.OpenBolt(path, storage.BoltOptions{MoveAsideCorrupt: true, Logger: hclog.NewNullLogger()})
		require.NoError(t, err, "%v: the flag moves the file aside", f)
		require.Empty(t, load(t, bucket(t, s, "registry")), f.String())
		require.NoError(t, s.Close())
		moved, _ := filepath.Glob(path + ".corrupt-*")
		require.Len(t, moved, 1, f.String())
	}
	t.Logf("%d flips, refused by page kind: %v", len(flips), refused)
	require.Positive(t, refused["branch"], "the flip that crashed bbolt is refused")
}

// multiLevelFile returns a closed store's bytes: 200 records of 1 KB, so
// that a branch page leads to some 60 leaves, written in one commit and then
// written again, unchanged, twice, so that both meta pages lead to the same
// records.
func multiLevelFile(t *testing.T) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := storage.OpenBolt(path, storage.BoltOptions{NoSync: true})
	require.NoError(t, err)
	ops := make([]storage.Op, 0, 200)
	for i := range cap(ops) {
		ops = append(ops, storage.Put(fmt.Appendf(nil, "key-%04d", i), bytes.Repeat([]byte{byte(i)}, 1<<10)))
	}
	b := bucket(t, s, "registry")
	apply(t, b, ops...)
	apply(t, b, ops[0])
	apply(t, b, ops[0])
	require.NoError(t, s.Close())
	full, err := os.ReadFile(path)
	require.NoError(t, err)
	return full
}

// openCopy opens a store on a copy of data, closed at the end of the test.
func openCopy(t *testing.T, data []byte) *storage.Bolt {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	writeFile(t, path, data)
	return openBolt(t, path)
}

// digest sums records up in a line a failure can print.
func digest(records []record) string {
	sum := sha256.New()
	for _, r := range records {
		fmt.Fprintf(sum, "%d:%s%d:%s", len(r.key), r.key, len(r.value), r.value)
	}
	return fmt.Sprintf("%d records, sha256 %x", len(records), sum.Sum(nil))
}

// TestBoltOpensEveryFileItWrote guards the page check against refusing a
// sound file: rounds of random puts and deletes, of values from empty to
// several pages, in several buckets (some left small enough to be inline),
// each round reopened and compared.
func TestBoltOpensEveryFileItWrote(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 1))
	path := filepath.Join(t.TempDir(), "state.db")
	want := map[string]map[string]string{}
	for round := range 20 {
		s, err := storage.OpenBolt(path, storage.BoltOptions{NoSync: true})
		require.NoError(t, err, "round %d: the file it wrote opens", round)
		for name, records := range want {
			require.Equal(t, digest(sorted(records)), digest(load(t, bucket(t, s, name))), "round %d, bucket %s", round, name)
		}
		for range 1 + rng.IntN(4) {
			name := fmt.Sprintf("b%d", rng.IntN(4))
			if want[name] == nil {
				want[name] = map[string]string{}
			}
			var ops []storage.Op
			for range 1 + rng.IntN(40) {
				key := fmt.Sprintf("k%03d", rng.IntN(300))
				if rng.IntN(3) == 0 {
					ops = append(ops, storage.Delete([]byte(key)))
					delete(want[name], key)
					continue
				}
				value := string(bytes.Repeat([]byte{byte(rng.IntN(256))}, rng.IntN(1+rng.IntN(3)*9000)))
				ops = append(ops, storage.Put([]byte(key), []byte(value)))
				want[name][key] = value
			}
			apply(t, bucket(t, s, name), ops...)
		}
		require.NoError(t, s.Close())
	}
}

// sorted lists records in key order, as Load gives them.
func sorted(records map[string]string) []record {
	out := make([]record, 0, len(records))
	for _, k := range slices.Sorted(maps.Keys(records)) {
		out = append(out, record{k, records[k]})
	}
	return out
}
