package hostpath

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReplacingARecordReusesItsTwoFiles writes a record again and again:
// each write leaves the latest content at the record's path, the record
// and its spare keep the same two inodes from the second write on (no file
// is created or freed per write), recordIDs lists the record once, and
// removing it removes both files.
func TestReplacingARecordReusesItsTwoFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "v"+recordSuffix)
	inodes := func() map[uint64]bool {
		out := map[uint64]bool{}
		for _, p := range []string{path, spareOf(path)} {
			fi, err := os.Stat(p)
			require.NoError(t, err)
			out[fi.Sys().(*syscall.Stat_t).Ino] = true
		}
		return out
	}
	require.NoError(t, writeJSON(path, nodeRecord{VolumeID: "v", StagingPath: "/s0"}))
	require.NoError(t, writeJSON(path, nodeRecord{VolumeID: "v", StagingPath: "/s1"}))
	first := inodes()
	for _, staging := range []string{"/s2", "/s3", "/s4"} {
		require.NoError(t, writeJSON(path, nodeRecord{VolumeID: "v", StagingPath: staging}))
		var rec nodeRecord
		found, err := readJSON(path, &rec)
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, staging, rec.StagingPath)
		require.Equal(t, first, inodes(), "a write created or freed a file")
	}
	ids, err := recordIDs(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"v"}, ids)

	require.NoError(t, removeRecord(path))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries)
}
