package storage_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/storage"
)

// record is one key/value pair as Load reported it.
type record struct{ key, value string }

// implementations are the Stores that must behave alike.
var implementations = []struct {
	name string
	open func(t *testing.T) storage.Store
}{
	{"bolt", func(t *testing.T) storage.Store { return openBolt(t, filepath.Join(t.TempDir(), "state.db")) }},
	{"memory", func(t *testing.T) storage.Store {
		m := storage.NewMemory()
		t.Cleanup(func() { require.NoError(t, m.Close()) })
		return m
	}},
}

// contract is what every Store does, run once per implementation.
var contract = []struct {
	name string
	run  func(t *testing.T, s storage.Store)
}{
	{"a bucket never written to loads nothing", func(t *testing.T, s storage.Store) {
		require.Empty(t, load(t, bucket(t, s, "registry")))
	}},
	{"records load back in key order whatever order they were written in", func(t *testing.T, s storage.Store) {
		b := bucket(t, s, "registry")
		apply(t, b, put("b", "2"), put("\xff", "last"), put("a", "1"))
		apply(t, b, put("\x00", "first"), put("ab", "\x00\x01\x02"))
		require.Equal(t, []record{{"\x00", "first"}, {"a", "1"}, {"ab", "\x00\x01\x02"}, {"b", "2"}, {"\xff", "last"}}, load(t, b))
	}},
	{"a nil value deletes the key", func(t *testing.T, s storage.Store) {
		b := bucket(t, s, "registry")
		apply(t, b, put("a", "1"), put("b", "2"))
		apply(t, b, storage.Op{Key: []byte("a")})
		require.Equal(t, []record{{"b", "2"}}, load(t, b))
	}},
	{"Delete removes the key", func(t *testing.T, s storage.Store) {
		b := bucket(t, s, "registry")
		apply(t, b, put("a", "1"))
		apply(t, b, storage.Delete([]byte("a")))
		require.Empty(t, load(t, b))
	}},
	{"an empty value is a record, not a delete", func(t *testing.T, s storage.Store) {
		b := bucket(t, s, "registry")
		apply(t, b, storage.Op{Key: []byte("a"), Value: []byte{}}, storage.Put([]byte("b"), nil))
		require.Equal(t, []record{{"a", ""}, {"b", ""}}, load(t, b))
	}},
	{"deleting a key that does not exist is not an error", func(t *testing.T, s storage.Store) {
		b := bucket(t, s, "registry")
		apply(t, b, storage.Delete([]byte("missing")))
		require.Empty(t, load(t, b))
	}},
	{"a later op on the same key in one batch wins", func(t *testing.T, s storage.Store) {
		b := bucket(t, s, "registry")
		apply(t, b, put("a", "1"), put("a", "2"), put("c", "1"), storage.Delete([]byte("c")), storage.Delete([]byte("d")), put("d", "3"))
		require.Equal(t, []record{{"a", "2"}, {"d", "3"}}, load(t, b))
	}},
	{"an empty batch changes nothing", func(t *testing.T, s storage.Store) {
		b := bucket(t, s, "registry")
		apply(t, b, put("a", "1"))
		require.NoError(t, b.Apply(nil))
		require.NoError(t, b.Apply([]storage.Op{}))
		require.Equal(t, []record{{"a", "1"}}, load(t, b))
	}},
	{"a batch with a bad op is refused whole", func(t *testing.T, s storage.Store) {
		b := bucket(t, s, "registry")
		apply(t, b, put("kept", "1"))
		for _, bad := range []struct {
			name string
			op   storage.Op
			want string
		}{
			{"empty key", put("", "x"), "op 1: key must not be empty"},
			{"nil key", storage.Op{Value: []byte("x")}, "op 1: key must not be empty"},
			{"key over the limit", put(strings.Repeat("k", storage.MaxKeyLen+1), "x"), "longer than 32768"},
		} {
			err := b.Apply([]storage.Op{put("new", "1"), bad.op})
			require.ErrorIs(t, err, storage.ErrInvalid, bad.name)
			require.ErrorContains(t, err, bad.want, bad.name)
			require.ErrorContains(t, err, `invalid input: bucket "registry"`, bad.name)
		}
		require.Equal(t, []record{{"kept", "1"}}, load(t, b))
	}},
	{"a key of the largest size is accepted", func(t *testing.T, s storage.Store) {
		b := bucket(t, s, "registry")
		key := strings.Repeat("k", storage.MaxKeyLen)
		apply(t, b, put(key, "v"))
		require.Equal(t, []record{{key, "v"}}, load(t, b))
	}},
	{"bucket names are checked", func(t *testing.T, s storage.Store) {
		for _, c := range []struct {
			name, bucket, want string
		}{
			{"an empty name", "", "bucket name must not be empty"},
			{"a name longer than 64 bytes", strings.Repeat("n", 65), "is 65 bytes, longer than 64"},
			{"a name with a NUL byte", "csi\x00catalog", "contains a NUL byte"},
		} {
			_, err := s.Bucket(c.bucket)
			require.ErrorIs(t, err, storage.ErrInvalid, c.name)
			require.ErrorContains(t, err, c.want, c.name)
		}
		apply(t, bucket(t, s, strings.Repeat("n", 64)), put("a", "1"))
		apply(t, bucket(t, s, "csi/catalog: ünïcode"), put("a", "1"))
	}},
	{"buckets keep their records apart", func(t *testing.T, s storage.Store) {
		registry, catalog := bucket(t, s, "registry"), bucket(t, s, "catalog")
		apply(t, registry, put("a", "registry"))
		apply(t, catalog, put("a", "catalog"), put("b", "catalog"))
		apply(t, registry, storage.Delete([]byte("b")))
		require.Equal(t, []record{{"a", "registry"}}, load(t, registry))
		require.Equal(t, []record{{"a", "catalog"}, {"b", "catalog"}}, load(t, catalog))
	}},
	{"two handles on one bucket name share its records", func(t *testing.T, s storage.Store) {
		apply(t, bucket(t, s, "registry"), put("a", "1"))
		require.Equal(t, []record{{"a", "1"}}, load(t, bucket(t, s, "registry")))
	}},
	{"changing the caller's slices after Apply does not change the record", func(t *testing.T, s storage.Store) {
		b := bucket(t, s, "registry")
		key, value := []byte("a"), []byte("1")
		apply(t, b, storage.Op{Key: key, Value: value})
		key[0], value[0] = 'z', '9'
		require.Equal(t, []record{{"a", "1"}}, load(t, b))
	}},
	{"an error from the load function stops the walk and is returned", func(t *testing.T, s storage.Store) {
		b := bucket(t, s, "registry")
		apply(t, b, put("a", "1"), put("b", "2"))
		stop := errors.New("stop here")
		calls := 0
		err := b.Load(func(key, value []byte) error {
			calls++
			return stop
		})
		require.Same(t, stop, err)
		require.Equal(t, 1, calls)
	}},
	{"concurrent batches on several buckets all land", func(t *testing.T, s storage.Store) {
		const writers, batches = 16, 10
		buckets := []storage.Bucket{bucket(t, s, "registry"), bucket(t, s, "catalog")}
		var wg sync.WaitGroup
		errs := make(chan error, writers*batches)
		for w := range writers {
			wg.Go(func() {
				for i := range batches {
					key := fmt.Sprintf("w%02d-%02d", w, i)
					errs <- buckets[w%2].Apply([]storage.Op{put(key, key), put(key+"-second", key)})
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Len(t, load(t, buckets[0]), writers/2*batches*2)
		require.Len(t, load(t, buckets[1]), writers/2*batches*2)
	}},
	{"every call after Close fails with ErrClosed", func(t *testing.T, s storage.Store) {
		b := bucket(t, s, "registry")
		apply(t, b, put("a", "1"))
		require.NoError(t, s.Close())

		_, err := s.Bucket("registry")
		require.ErrorIs(t, err, storage.ErrClosed)
		require.ErrorIs(t, b.Apply([]storage.Op{put("b", "2")}), storage.ErrClosed)
		require.ErrorIs(t, b.Apply(nil), storage.ErrClosed)
		require.ErrorIs(t, b.Load(func(key, value []byte) error { return nil }), storage.ErrClosed)
		require.EqualError(t, storage.ErrClosed, "store is closed")
	}},
	{"Close can be called again", func(t *testing.T, s storage.Store) {
		require.NoError(t, s.Close())
		require.NoError(t, s.Close())
	}},
}

// TestStoreContract runs the contract against every implementation.
func TestStoreContract(t *testing.T) {
	for _, impl := range implementations {
		t.Run(impl.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range contract {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					c.run(t, impl.open(t))
				})
			}
		})
	}
}

// openBolt opens a Bolt store at path, closed at cleanup.
func openBolt(t *testing.T, path string) *storage.Bolt {
	t.Helper()
	s, err := storage.OpenBolt(path, storage.BoltOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// bucket returns the named bucket of s.
func bucket(t *testing.T, s storage.Store, name string) storage.Bucket {
	t.Helper()
	b, err := s.Bucket(name)
	require.NoError(t, err)
	return b
}

// put is storage.Put for strings.
func put(key, value string) storage.Op {
	return storage.Put([]byte(key), []byte(value))
}

// apply applies ops to b.
func apply(t *testing.T, b storage.Bucket, ops ...storage.Op) {
	t.Helper()
	require.NoError(t, b.Apply(ops))
}

// load returns every record of b, copied, in the order Load gave them.
func load(t *testing.T, b storage.Bucket) []record {
	t.Helper()
	var records []record
	require.NoError(t, b.Load(func(key, value []byte) error {
		records = append(records, record{string(key), string(value)})
		return nil
	}))
	return records
}
