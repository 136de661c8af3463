package registry

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry/internal/table"
	"github.com/plugvisor/plugvisor/storage"
)

// BucketName is the storage bucket that holds the registry's allocations.
const BucketName = "registry.allocations"

// sequenceKey holds the last sequence number handed out, so that the
// sequence never goes backwards across a restart, even when the records
// that carried the highest numbers were deregistered. Allocation keys
// start with a validated, non-empty type, so no allocation can have it.
var sequenceKey = []byte("\x00sequence")

// Field numbers of messages.StoredAllocation, which records are encoded
// as by hand (see encodePlugin), off the actor and without a copy;
// decoding is the generated code's. changedField is the sequence of the
// last event that changed the allocation, which replay reports.
const (
	pluginField  protowire.Number = 1
	orderField   protowire.Number = 2
	changedField protowire.Number = 3
	// recordReserve is the room for both sequences: a one-byte tag and
	// a varint of at most ten bytes each.
	recordReserve = 2 * (1 + 10)
)

// storageKey is "type NUL name NUL alloc"; validation keeps NUL out of IDs.
func storageKey(ptype, name, alloc string) []byte {
	return []byte(ptype + "\x00" + name + "\x00" + alloc)
}

// encodePlugin encodes the part of an allocation's record that does not
// depend on the registry's state: the plugin field of a StoredAllocation.
// Callers of the facade run it, so the actor only appends the sequences.
func encodePlugin(info *messages.PluginInfo) []byte {
	body, err := proto.Marshal(info)
	if err != nil {
		// Marshal fails only for invalid UTF-8 in strings, which
		// validation has already refused.
		panic(fmt.Sprintf("registry: encode allocation: %v", err))
	}
	out := make([]byte, 0, protowire.SizeTag(pluginField)+protowire.SizeBytes(len(body))+recordReserve)
	out = protowire.AppendTag(out, pluginField, protowire.BytesType)
	return protowire.AppendBytes(out, body)
}

// putOp stores allocation a, whose plugin field encodePlugin made. It
// appends to plugin in the room encodePlugin left: a write's record is
// made again only when the write is applied again after a failed batch,
// and by then no batch holds the earlier one.
func putOp(a *table.Allocation, plugin []byte) storage.Op {
	value := protowire.AppendTag(plugin, orderField, protowire.VarintType)
	value = protowire.AppendVarint(value, a.Order())
	if a.Changed() != a.Order() {
		value = protowire.AppendTag(value, changedField, protowire.VarintType)
		value = protowire.AppendVarint(value, a.Changed())
	}
	return storage.Put(storageKey(a.Info().GetType(), a.Info().GetName(), a.Info().GetAllocId()), value)
}

func deleteOp(info *messages.PluginInfo) storage.Op {
	return storage.Delete(storageKey(info.GetType(), info.GetName(), info.GetAllocId()))
}

func sequenceOp(seq uint64) storage.Op {
	return storage.Put(sequenceKey, protowire.AppendVarint(nil, seq))
}

// load rebuilds the tables and the last sequence from a bucket. A record
// that does not decode, fails validation, sits under the wrong key or
// holds a sequence beyond table.MaxSequence is corruption (storage.CorruptRecord, matching storage.ErrCorrupt) naming it
// and the remedy: a registry never starts silently empty or half-restored.
func load(bucket storage.Bucket) (*table.Working, uint64, error) {
	tables := table.NewWorking()
	var last uint64
	err := bucket.Load(func(key, value []byte) error {
		if string(key) == string(sequenceKey) {
			seq, n := protowire.ConsumeVarint(value)
			if n != len(value) {
				return storage.CorruptRecord(BucketName, key, fmt.Errorf("the sequence record does not decode"))
			}
			if seq > table.MaxSequence {
				return storage.CorruptRecord(BucketName, key, fmt.Errorf("the sequence record's %d is beyond the last, %d", seq, uint64(table.MaxSequence)))
			}
			last = max(last, seq)
			return nil
		}
		a, err := decodeAllocation(key, value)
		if err != nil {
			return err
		}
		tables.Table(a.Info().GetType()).Put(a)
		last = max(last, a.Changed())
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return tables, last, nil
}

func decodeAllocation(key, value []byte) (*table.Allocation, error) {
	var stored messages.StoredAllocation
	if err := proto.Unmarshal(value, &stored); err != nil {
		return nil, storage.CorruptRecord(BucketName, key, fmt.Errorf("the record does not decode: %w", err))
	}
	info := stored.GetPlugin()
	if err := ValidatePlugin(info); err != nil {
		return nil, storage.CorruptRecord(BucketName, key, fmt.Errorf("the record is invalid: %w", err))
	}
	if want := storageKey(info.GetType(), info.GetName(), info.GetAllocId()); string(want) != string(key) {
		return nil, storage.CorruptRecord(BucketName, key, fmt.Errorf("the record holds plugin %q", printable(want)))
	}
	// A sequence beyond table.MaxSequence would set updatedBit on an
	// allocation that has no changed field (see table.Allocation.Changed).
	for _, seq := range []struct {
		field string
		value uint64
	}{{"sequence", stored.GetSequence()}, {"changed", stored.GetChanged()}} {
		if seq.value > table.MaxSequence {
			return nil, storage.CorruptRecord(BucketName, key, fmt.Errorf("the record's %s %d is beyond the last, %d", seq.field, seq.value, uint64(table.MaxSequence)))
		}
	}
	return table.NewAllocation(info, stored.GetSequence(), max(stored.GetSequence(), stored.GetChanged())), nil
}

func printable(key []byte) string {
	return strings.ReplaceAll(string(key), "\x00", "/")
}
