package hostpath

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// writeIn names, in the environment of the test binary started by
// TestEachRecordWriteSyncsItsDirectoryAfterTheRename, the directory it
// writes a record in.
const writeIn = "PLUGVISOR_HOSTPATH_WRITE_IN"

// TestEachRecordWriteSyncsItsDirectoryAfterTheRename writes a record three
// times (the first a rename, the others a swap) in this test's binary run
// again under strace, and reads the system calls it made: after each
// rename or swap of the record that succeeded, and before the write
// returns, the directory is fsynced: a rename whose directory is not
// synced may be lost in a crash.
func TestEachRecordWriteSyncsItsDirectoryAfterTheRename(t *testing.T) {
	if dir := os.Getenv(writeIn); dir != "" {
		for _, staging := range []string{"/s0", "/s1", "/s2"} {
			require.NoError(t, writeJSON(filepath.Join(dir, "v"+recordSuffix), nodeRecord{VolumeID: "v", StagingPath: staging}))
			_, err := os.Stat("/end of a write")
			require.Error(t, err)
		}
		return
	}
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("strace is not installed (apt-get install strace): it shows the system calls of a record's write")
	}
	dir, trace := t.TempDir(), filepath.Join(t.TempDir(), "trace")
	cmd := exec.Command(strace, "-f", "-qq", "-y", "-e", "signal=none", "-e", "trace=rename,renameat,renameat2,fsync,fdatasync,newfstatat,stat",
		"-o", trace, os.Args[0], "-test.run=^TestEachRecordWriteSyncsItsDirectoryAfterTheRename$", "-test.count=1")
	cmd.Env = append(os.Environ(), writeIn+"="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil && strings.Contains(string(out), "ptrace") {
		t.Skipf("strace cannot trace here (a container without ptrace?): %s", out)
	}
	require.NoError(t, err, "%s", out)
	data, err := os.ReadFile(trace)
	require.NoError(t, err)

	var writes []string // per write, the calls on the record's files and directory
	var calls []string
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case strings.Contains(line, "/end of a write"):
			writes, calls = append(writes, strings.Join(calls, " ")), nil
		case strings.Contains(line, `"`+filepath.Join(dir, "v"+recordSuffix)+`"`) && strings.Contains(line, "rename") && strings.HasSuffix(line, "= 0"):
			calls = append(calls, "rename")
		case strings.Contains(line, "fsync(") && strings.Contains(line, "<"+dir+">"):
			calls = append(calls, "sync-dir")
		}
	}
	require.Equal(t, []string{"rename sync-dir", "rename sync-dir", "rename sync-dir"}, writes, "the calls of each write:\n%s", data)
}
