package registry

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/storage"
)

// BucketName is the storage bucket that holds the registry's allocations.
const BucketName = "registry.allocations"

// storageKey is "type NUL name NUL alloc"; validation keeps NUL out of IDs.
func storageKey(ptype, name, alloc string) []byte {
	return []byte(ptype + "\x00" + name + "\x00" + alloc)
}

func putOp(a *allocation) storage.Op {
	value, err := proto.Marshal(&messages.StoredAllocation{Plugin: a.info, Sequence: a.order})
	if err != nil {
		// Marshal fails only for invalid UTF-8 in strings, which
		// validation has already refused.
		panic(fmt.Sprintf("registry: encode allocation: %v", err))
	}
	return storage.Put(storageKey(a.info.GetType(), a.info.GetName(), a.info.GetAllocId()), value)
}

func deleteOp(info *messages.PluginInfo) storage.Op {
	return storage.Delete(storageKey(info.GetType(), info.GetName(), info.GetAllocId()))
}

// load rebuilds the tables from a bucket. A record that does not decode,
// fails validation or sits under the wrong key is corruption
// (storage.CorruptRecord, matching storage.ErrCorrupt) naming it and the
// remedy: a registry never starts silently empty or half-restored.
func load(bucket storage.Bucket) (map[string]*pluginTable, uint64, error) {
	tables := map[string]*pluginTable{}
	var last uint64
	err := bucket.Load(func(key, value []byte) error {
		var stored messages.StoredAllocation
		if err := proto.Unmarshal(value, &stored); err != nil {
			return storage.CorruptRecord(BucketName, key, fmt.Errorf("registry: restore: the record does not decode: %w", err))
		}
		info := stored.GetPlugin()
		if err := ValidatePlugin(info); err != nil {
			return storage.CorruptRecord(BucketName, key, fmt.Errorf("registry: restore: the record is invalid: %w", err))
		}
		if want := storageKey(info.GetType(), info.GetName(), info.GetAllocId()); string(want) != string(key) {
			return storage.CorruptRecord(BucketName, key, fmt.Errorf("registry: restore: the record holds plugin %q", printable(want)))
		}
		t, ok := tables[info.GetType()]
		if !ok {
			t = newPluginTable()
			tables[info.GetType()] = t
		}
		t.put(&allocation{info: info, order: stored.GetSequence()})
		last = max(last, stored.GetSequence())
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return tables, last, nil
}

func printable(key []byte) string {
	return strings.ReplaceAll(string(key), "\x00", "/")
}
