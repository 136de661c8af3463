package storage_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/plugvisor/plugvisor/storage"
)

// writeRaw writes records straight into a bbolt file, as a plugvisor from
// before checksums did, plus extra buckets given as is.
func writeRaw(t *testing.T, path string, buckets map[string]map[string]string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		for name, records := range buckets {
			b, err := tx.CreateBucketIfNotExists([]byte(name))
			if err != nil {
				return err
			}
			for k, v := range records {
				if err := b.Put([]byte(k), []byte(v)); err != nil {
					return err
				}
			}
		}
		return nil
	}))
	require.NoError(t, db.Close())
}

// readRaw returns the stored bytes of one record, bypassing the store.
func readRaw(t *testing.T, path, bucket, key string) []byte {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	require.NoError(t, err)
	defer db.Close()
	var out []byte
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bucket))
		if b == nil {
			return errors.New("no bucket " + bucket)
		}
		out = append([]byte(nil), b.Get([]byte(key))...)
		return nil
	}))
	return out
}

func TestBoltStoresEveryValueWithItsChecksum(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := openBolt(t, path)
	apply(t, bucket(t, s, "registry"), put("a", "hello"))
	require.NoError(t, s.Close())

	raw := readRaw(t, path, "registry", "a")
	require.Len(t, raw, 4+len("hello"), "a 4-byte CRC32C is stored in front of the value")
	require.Equal(t, "hello", string(raw[4:]))
	require.Equal(t, "2", string(readRaw(t, path, "\x00plugvisor", "format")))
}

func TestBoltUpgradesAFileWrittenBeforeChecksums(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	writeRaw(t, path, map[string]map[string]string{
		"registry": {"a": "1", "b": "2"},
		"catalog":  {"vol": "x"},
	})

	s := openBolt(t, path)
	require.Equal(t, []record{{"a", "1"}, {"b", "2"}}, load(t, bucket(t, s, "registry")))
	require.Equal(t, []record{{"vol", "x"}}, load(t, bucket(t, s, "catalog")))
	require.NoError(t, s.Close())

	require.Len(t, readRaw(t, path, "registry", "a"), 4+1, "the old records were sealed on open")
	require.Equal(t, "2", string(readRaw(t, path, "\x00plugvisor", "format")))
	s = openBolt(t, path)
	require.Equal(t, []record{{"a", "1"}, {"b", "2"}}, load(t, bucket(t, s, "registry")), "a second open changes nothing")
}

func TestBoltRefusesAFileFromANewerVersionWithoutTouchingIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	writeRaw(t, path, map[string]map[string]string{"\x00plugvisor": {"format": "3"}, "registry": {"a": "future"}})
	before := snapshot(t, path)

	_, err := storage.OpenBolt(path, storage.BoltOptions{MoveAsideCorrupt: true})
	require.ErrorContains(t, err, "format 3 by a newer plugvisor")
	require.NotErrorIs(t, err, storage.ErrCorrupt, "a newer file is not corrupt and is never moved aside")
	require.Equal(t, before, snapshot(t, path))
}

func TestBoltTakesAnUnreadableFormatRecordForCorruption(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	writeRaw(t, path, map[string]map[string]string{"\x00plugvisor": {"format": "two"}})
	_, err := storage.OpenBolt(path, storage.BoltOptions{})
	require.ErrorIs(t, err, storage.ErrCorrupt)
	require.ErrorContains(t, err, "-reset-corrupt-state")
}

func TestCorruptRecordNamesTheRecordAndTheRemedy(t *testing.T) {
	cause := errors.New("does not decode")
	err := storage.CorruptRecord("registry.allocations", []byte("csi\x00ebs\x00a1"), cause)
	require.ErrorIs(t, err, storage.ErrCorrupt)
	require.ErrorIs(t, err, cause)
	require.ErrorContains(t, err, `bucket "registry.allocations", record "csi/ebs/a1": does not decode`)
	require.ErrorContains(t, err, "restart the agent with -reset-corrupt-state")
}
