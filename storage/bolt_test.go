package storage_test

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/storage"
)

const pageSize = 4096 // bbolt's page size on this platform

func TestBoltKeepsRecordsAcrossReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := storage.OpenBolt(path, storage.BoltOptions{})
	require.NoError(t, err)
	apply(t, bucket(t, s, "registry"), put("a", "1"), put("b", "2"))
	apply(t, bucket(t, s, "catalog"), put("vol", "x"))
	require.NoError(t, s.Close())

	s = openBolt(t, path)
	require.Equal(t, path, s.Path())
	require.Equal(t, []record{{"a", "1"}, {"b", "2"}}, load(t, bucket(t, s, "registry")))
	require.Equal(t, []record{{"vol", "x"}}, load(t, bucket(t, s, "catalog")))
}

func TestBoltCreatesOnlyTheStateFile(t *testing.T) {
	dir := t.TempDir()
	openBolt(t, filepath.Join(dir, "state.db"))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file is left beside the state file")
	require.Equal(t, "state.db", entries[0].Name())
	info, err := entries[0].Info()
	require.NoError(t, err)
	require.Equal(t, fs.FileMode(0o600), info.Mode().Perm())
}

func TestBoltOpenFailsClearlyWhenTheDirectoryIsMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "state.db")
	_, err := storage.OpenBolt(path, storage.BoltOptions{MoveAsideCorrupt: true})
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.NotErrorIs(t, err, storage.ErrCorrupt)
	require.ErrorContains(t, err, filepath.Dir(path))
}

// badFiles are the files OpenBolt must refuse. Each prepare makes the file at
// path (from a real store of several pages in full when it needs one).
var badFiles = []struct {
	name    string
	prepare func(t *testing.T, path string, full []byte)
	// corrupt files fail with ErrCorrupt and are moved aside on request; the
	// others are never moved, and fail with wantErr when it is set.
	corrupt bool
	wantErr error
	want    string
}{
	{name: "random bytes", corrupt: true, want: "invalid database", prepare: func(t *testing.T, path string, _ []byte) {
		writeFile(t, path, randomBytes(t, 16*pageSize))
	}},
	{name: "a real file cut short", corrupt: true, want: "it was cut short", prepare: func(t *testing.T, path string, full []byte) {
		writeFile(t, path, full[:len(full)/2])
	}},
	{name: "a real file cut inside its meta pages", corrupt: true, want: "file size too small", prepare: func(t *testing.T, path string, full []byte) {
		writeFile(t, path, full[:pageSize+100])
	}},
	{name: "a real file with a garbled data page", corrupt: true, want: "says it is page", prepare: func(t *testing.T, path string, full []byte) {
		garbled := bytes.Clone(full)
		page := recordOffset(t, full, "key-0100") / pageSize * pageSize
		copy(garbled[page:page+pageSize], randomBytes(t, pageSize))
		writeFile(t, path, garbled)
	}},
	{name: "a real file with one bit flipped in a value", corrupt: true, want: "checksum mismatch", prepare: func(t *testing.T, path string, full []byte) {
		flipped := bytes.Clone(full)
		flipped[recordOffset(t, full, "key-0100")+8+100] ^= 0x01 // inside a value of the leaf
		writeFile(t, path, flipped)
	}},
	{name: "a real file with one bit flipped in a key", corrupt: true, want: "checksum mismatch", prepare: func(t *testing.T, path string, full []byte) {
		flipped := bytes.Clone(full)
		flipped[recordOffset(t, full, "key-0100")+7] ^= 0x01 // key-0100 now reads key-0101
		writeFile(t, path, flipped)
	}},
	{name: "an empty file", corrupt: true, want: "the file is empty", prepare: func(t *testing.T, path string, _ []byte) {
		writeFile(t, path, nil)
	}},
	{name: "a directory", want: "is not a regular file", prepare: func(t *testing.T, path string, _ []byte) {
		require.NoError(t, os.Mkdir(path, 0o700))
	}},
	{name: "a file the agent may not read", wantErr: fs.ErrPermission, want: "permission denied", prepare: func(t *testing.T, path string, full []byte) {
		if os.Geteuid() == 0 {
			t.Skip("running as root, which reads any file: run the tests as another user to check unreadable files")
		}
		writeFile(t, path, full)
		require.NoError(t, os.Chmod(path, 0o200))
	}},
}

func TestBoltRefusesUnusableFiles(t *testing.T) {
	full := realFile(t)
	for _, c := range badFiles {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "state.db")
			c.prepare(t, path, full)
			before := snapshot(t, path)

			_, err := storage.OpenBolt(path, storage.BoltOptions{})
			require.Error(t, err)
			require.ErrorContains(t, err, c.want)
			require.ErrorContains(t, err, path)
			require.Equal(t, before, snapshot(t, path), "a refused file is left as it was")
			if !c.corrupt {
				require.NotErrorIs(t, err, storage.ErrCorrupt)
				if c.wantErr != nil {
					require.ErrorIs(t, err, c.wantErr)
				}
				return
			}
			require.ErrorIs(t, err, storage.ErrCorrupt)
			require.ErrorContains(t, err, "state file is corrupt: "+path)
			require.ErrorContains(t, err, "-reset-corrupt-state flag (BoltOptions.MoveAsideCorrupt) moves it aside")
		})
	}
}

func TestBoltMovesCorruptFilesAsideOnRequest(t *testing.T) {
	full := realFile(t)
	for _, c := range badFiles {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "state.db")
			c.prepare(t, path, full)
			before := snapshot(t, path)
			var logs bytes.Buffer // OpenBolt logs on the calling goroutine
			opts := storage.BoltOptions{MoveAsideCorrupt: true, Logger: hclog.New(&hclog.LoggerOptions{Output: &logs})}

			start := time.Now().UTC().Truncate(time.Second)
			s, err := storage.OpenBolt(path, opts)
			if !c.corrupt {
				require.ErrorContains(t, err, c.want)
				require.NotErrorIs(t, err, storage.ErrCorrupt)
				require.Equal(t, before, snapshot(t, path), "only corrupt files are moved")
				require.Empty(t, logs.String())
				return
			}
			require.NoError(t, err)
			defer func() { require.NoError(t, s.Close()) }()
			require.Empty(t, load(t, bucket(t, s, "registry")), "the store starts empty")
			apply(t, bucket(t, s, "registry"), put("a", "1"))

			moved, err := filepath.Glob(path + ".corrupt-*")
			require.NoError(t, err)
			require.Len(t, moved, 1)
			require.Equal(t, before, snapshot(t, moved[0]), "the corrupt file is kept, unchanged, under its new name")
			stamp, err := time.Parse("20060102T150405.000000000Z", moved[0][len(path+".corrupt-"):])
			require.NoError(t, err, "the new name ends in a UTC timestamp")
			require.WithinRange(t, stamp, start, time.Now().UTC())

			require.Contains(t, logs.String(), "[WARN]")
			require.Contains(t, logs.String(), "moved it aside and started with an empty store")
			require.Contains(t, logs.String(), "moved_to="+moved[0])
			require.Contains(t, logs.String(), c.want)
		})
	}
}

func TestBoltSecondOpenIsLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	first, err := storage.OpenBolt(path, storage.BoltOptions{})
	require.NoError(t, err)

	for _, opts := range []storage.BoltOptions{
		{LockTimeout: 200 * time.Millisecond},
		{LockTimeout: time.Nanosecond, MoveAsideCorrupt: true},
	} {
		start := time.Now()
		_, err = storage.OpenBolt(path, opts)
		requireLocked(t, err, path)
		require.Less(t, time.Since(start), opts.LockTimeout+2*time.Second, "gives up after about LockTimeout")
	}
	moved, err := filepath.Glob(path + ".corrupt-*")
	require.NoError(t, err)
	require.Empty(t, moved, "a locked file is never taken for a corrupt one")

	require.NoError(t, first.Close())
	second := openBolt(t, path)
	apply(t, bucket(t, second, "registry"), put("a", "1"))
}

func TestBoltWaitsForALockReleasedWithinTheTimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	first, err := storage.OpenBolt(path, storage.BoltOptions{})
	require.NoError(t, err)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		time.Sleep(200 * time.Millisecond)
		require.NoError(t, first.Close())
	})

	openBolt(t, path) // waits for first.Close, well inside the default second
}

func TestBoltOpenIsLockedByAnotherProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	holder := startHelper(t, helperHold, path)
	require.Equal(t, "ready", holder.nextLine(t))

	_, err := storage.OpenBolt(path, storage.BoltOptions{LockTimeout: 200 * time.Millisecond, MoveAsideCorrupt: true})
	requireLocked(t, err, path)

	require.NoError(t, holder.stdin.Close())
	require.NoError(t, holder.cmd.Wait())
	openBolt(t, path)
}

func TestBoltConcurrentAppliesShareCommits(t *testing.T) {
	const writers = 64
	s := openBolt(t, filepath.Join(t.TempDir(), "state.db"))
	buckets := []storage.Bucket{bucket(t, s, "registry"), bucket(t, s, "catalog")}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			<-start
			key := fmt.Sprintf("w%02d", w)
			require.NoError(t, buckets[w%2].Apply([]storage.Op{put(key, key)}))
		})
	}
	close(start)
	wg.Wait()

	commits := s.Commits()
	require.Positive(t, s.CommitTime(), "the time spent committing is counted")
	t.Logf("%d concurrent Apply calls on 2 buckets took %d commits", writers, commits)
	require.LessOrEqual(t, commits, int64(writers/2))
	require.Len(t, load(t, buckets[0]), writers/2)
	require.Len(t, load(t, buckets[1]), writers/2)
}

func TestBoltCloseWaitsForLoad(t *testing.T) {
	s, err := storage.OpenBolt(filepath.Join(t.TempDir(), "state.db"), storage.BoltOptions{})
	require.NoError(t, err)
	b := bucket(t, s, "registry")
	apply(t, b, put("a", "1"))

	inLoad, closed := make(chan struct{}), make(chan error, 1)
	var wg sync.WaitGroup
	require.NoError(t, b.Load(func(key, value []byte) error {
		close(inLoad)
		wg.Go(func() { closed <- s.Close() })
		select {
		case <-closed:
			t.Error("Close returned while Load was reading")
		case <-time.After(100 * time.Millisecond):
		}
		require.Equal(t, "1", string(value), "the record is readable until Load returns")
		return nil
	}))
	<-inLoad
	require.NoError(t, <-closed)
	wg.Wait()
	require.ErrorIs(t, b.Load(func(key, value []byte) error { return nil }), storage.ErrClosed)
}

// realFile returns the bytes of a closed store holding enough records to
// span many pages.
// recordOffset is where key first appears in a file's bytes.
func recordOffset(t *testing.T, full []byte, key string) int {
	t.Helper()
	i := bytes.Index(full, []byte(key))
	require.GreaterOrEqual(t, i, 0, "key %s is in the file", key)
	return i
}

func realFile(t *testing.T) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := storage.OpenBolt(path, storage.BoltOptions{NoSync: true})
	require.NoError(t, err)
	value := bytes.Repeat([]byte("v"), 500)
	ops := make([]storage.Op, 0, 200)
	for i := range cap(ops) {
		ops = append(ops, storage.Put(fmt.Appendf(nil, "key-%04d", i), value))
	}
	apply(t, bucket(t, s, "registry"), ops...)
	require.NoError(t, s.Close())
	full, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Greater(t, len(full), 16*pageSize)
	return full
}

// snapshot describes what is at path: a file's bytes or "directory".
func snapshot(t *testing.T, path string) string {
	t.Helper()
	info, err := os.Stat(path)
	require.NoError(t, err)
	if info.IsDir() {
		return "directory"
	}
	if info.Mode().Perm()&0o400 == 0 {
		return fmt.Sprintf("unreadable file of %d bytes", info.Size())
	}
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(data)
}

// requireLocked checks that err is ErrLocked and tells the operator what to do.
func requireLocked(t *testing.T, err error, path string) {
	t.Helper()
	require.ErrorIs(t, err, storage.ErrLocked)
	require.ErrorContains(t, err, "state file is locked: "+path)
	require.ErrorContains(t, err, "stop the other plugvisor agent")
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, data, 0o600))
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return b
}
