package storage_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/storage"
)

// twoCommitFile returns a closed store's bytes whose two meta pages lead
// to different commits: the older holds before, the newer before and one
// record more, after. It returns the offsets of the newer and the older
// meta pages too.
func twoCommitFile(t *testing.T) (data []byte, before, after []record, newer, older int) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := storage.OpenBolt(path, storage.BoltOptions{NoSync: true})
	require.NoError(t, err)
	b := bucket(t, s, "registry")
	for i := range 20 {
		apply(t, b, storage.Put(fmt.Appendf(nil, "key-%02d", i), []byte("value")))
	}
	before = load(t, b)
	apply(t, b, storage.Put([]byte("last"), []byte("commit")))
	after = load(t, b)
	require.NoError(t, s.Close())
	data, err = os.ReadFile(path)
	require.NoError(t, err)
	pageSize := int(binary.NativeEndian.Uint32(data[16+8:]))
	newer, older = 0, pageSize
	if binary.NativeEndian.Uint64(data[pageSize+16+48:]) > binary.NativeEndian.Uint64(data[16+48:]) {
		newer, older = pageSize, 0
	}
	return data, before, after, newer, older
}

// TestAMetaPageWhoseHeaderAloneIsDamagedIsRewrittenAndKeepsEveryCommit is
// part of attack 5 of issue 39: a flipped page ID in the newer meta page
// made the open fail with "panic: assertion failed", where docs/security.md
// promised a fall back. The header (page ID and flags) of either meta
// page lies outside bbolt's checksum and has one right value: the open
// rewrites it, says so, and serves the newest commit; the file is sound
// again.
func TestAMetaPageWhoseHeaderAloneIsDamagedIsRewrittenAndKeepsEveryCommit(t *testing.T) {
	orig, _, after, newer, older := twoCommitFile(t)
	for _, meta := range []struct {
		name string
		at   int
	}{{"newer", newer}, {"older", older}} {
		for _, bit := range []int{0, 3, 8, 40, 63, 64, 66, 70} {
			name := fmt.Sprintf("the %s meta page, header bit %d", meta.name, bit)
			data := append([]byte(nil), orig...)
			data[meta.at+bit/8] ^= 1 << (bit % 8)
			path := filepath.Join(t.TempDir(), "state.db")
			writeFile(t, path, data)
			var logs probe.LogBuffer
			s, err := storage.OpenBolt(path, storage.BoltOptions{Logger: hclog.New(&hclog.LoggerOptions{Output: &logs})})
			require.NoError(t, err, name)
			require.Equal(t, digest(after), digest(load(t, bucket(t, s, "registry"))), "%s: the newest commit is served", name)
			require.NoError(t, s.Close())
			require.Contains(t, logs.String(), "storage: rewrote the damaged header of a meta page", name)
			pageSize := max(newer, older) // the other is 0
			require.Contains(t, logs.String(), fmt.Sprintf("meta page %d says it is page", meta.at/pageSize), name)
			repaired, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, orig[meta.at:meta.at+16], repaired[meta.at:meta.at+16], "%s: the header is what bbolt wrote", name)
		}
	}
}

// TestADamagedNewerMetaPageFallsBackToTheCommitBefore, as docs/security.md
// says: a flipped bit in the newer meta page's body fails its checksum,
// and the open serves the commit before.
func TestADamagedNewerMetaPageFallsBackToTheCommitBefore(t *testing.T) {
	orig, before, _, newer, _ := twoCommitFile(t)
	for _, at := range []int{16 + 20, 16 + 32, 16 + 48, 16 + 56} { // root, freelist, txid, checksum
		data := append([]byte(nil), orig...)
		data[newer+at] ^= 1
		path := filepath.Join(t.TempDir(), "state.db")
		writeFile(t, path, data)
		s, err := storage.OpenBolt(path, storage.BoltOptions{})
		require.NoError(t, err, "byte %d", at)
		require.Equal(t, digest(before), digest(load(t, bucket(t, s, "registry"))), "byte %d: the commit before is served", at)
		require.NoError(t, s.Close())
	}
}
