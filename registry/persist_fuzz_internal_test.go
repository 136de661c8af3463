package registry

import (
	"errors"
	"math"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry/internal/table"
	"github.com/plugvisor/plugvisor/storage"
)

// FuzzLoad: load never panics on a record and a sequence record of any
// value; it refuses what it cannot use as corruption, and what it loads
// has sequences no higher than table.MaxSequence, each allocation's changed at
// or after its order and at or before the last sequence.
func FuzzLoad(f *testing.F) {
	const key = "csi-node\x00p\x00a"
	record := func(seq, changed uint64) []byte {
		b, err := proto.Marshal(&messages.StoredAllocation{Plugin: &messages.PluginInfo{
			Type: "csi-node", Name: "p", AllocId: "a",
			Connection: &messages.ConnectionInfo{SocketPath: "/run/csi.sock"},
		}, Sequence: seq, Changed: changed})
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	f.Add([]byte(key), record(1, 1), uint64(1))
	f.Add([]byte(key), record(2, 5), uint64(5))
	f.Add([]byte(key), record(table.MaxSequence, table.MaxSequence), uint64(table.MaxSequence))
	f.Add([]byte(key), record(table.MaxSequence+1, table.MaxSequence+1), uint64(1))
	f.Add([]byte(key), record(3, math.MaxUint64), uint64(3))
	f.Add([]byte(key), record(1, 1), uint64(table.MaxSequence+1))
	f.Add([]byte(key), []byte{0xff}, uint64(0))
	f.Fuzz(func(t *testing.T, key, value []byte, seq uint64) {
		bucket, err := storage.NewMemory().Bucket(BucketName)
		if err != nil {
			t.Fatal(err)
		}
		ops := []storage.Op{storage.Put(sequenceKey, protowire.AppendVarint(nil, seq))}
		if len(key) > 0 && value != nil && string(key) != string(sequenceKey) {
			ops = append(ops, storage.Put(key, value))
		}
		if bucket.Apply(ops) != nil {
			return // a key or value the store itself refuses
		}
		tables, last, err := load(bucket)
		if err != nil {
			if !errors.Is(err, storage.ErrCorrupt) {
				t.Fatalf("load: %v, not corruption", err)
			}
			return
		}
		if last > table.MaxSequence {
			t.Fatalf("loaded the last sequence %d", last)
		}
		for _, tt := range tables.Freeze() {
			tt.Table.EachCurrent(func(a *table.Allocation) {
				if a.Order() > a.Changed() || a.Changed() > last {
					t.Fatalf("loaded order %d, changed %d with the last %d", a.Order(), a.Changed(), last)
				}
			})
		}
	})
}
