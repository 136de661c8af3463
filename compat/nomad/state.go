package nomad

import (
	"cmp"
	"container/list"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/client/dynamicplugins"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
)

// stateBucket is the registry's storage.Bucket kept in the embedder's
// dynamicplugins.StateStorage: each Apply writes the whole state, as
// Nomad's registry does on every change, in Nomad's shape (each plugin's
// allocations newest first), and succeeds only once Put has. It owns the
// records, guarded by mu; the registry actor is its only writer.
//
// Nomad's shape has no room for plugvisor's sequence numbers: a restore
// numbers the allocations afresh, in their order.
type stateBucket struct {
	state dynamicplugins.StateStorage
	log   hclog.Logger

	mu      sync.Mutex
	records map[string]record // by storage key; nil until loaded
}

// record is one stored allocation: the registry's bytes, and the same
// allocation as Nomad holds it, with its place in time.
type record struct {
	value []byte
	info  *dynamicplugins.PluginInfo
	order uint64
}

// Load restores the records from the state storage once, then calls fn for
// each. Like Nomad's NewRegistry, it starts empty when the state cannot be
// read, and it skips what plugvisor would refuse: both are logged, and
// neither is an error, so a registry always starts.
func (b *stateBucket) Load(fn func(key, value []byte) error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.records == nil {
		b.records = b.restore()
	}
	for _, key := range slices.Sorted(maps.Keys(b.records)) {
		if err := fn([]byte(key), b.records[key].value); err != nil {
			return err
		}
	}
	return nil
}

func (b *stateBucket) restore() map[string]record {
	records := map[string]record{}
	stored, err := b.state.GetDynamicPluginRegistryState()
	if err != nil || stored == nil {
		if err != nil {
			b.log.Error("cannot read the stored registry state; starting empty", "error", err)
		}
		return records
	}
	var order uint64
	for _, ptype := range slices.Sorted(maps.Keys(stored.Plugins)) {
		byName := stored.Plugins[ptype]
		for _, name := range slices.Sorted(maps.Keys(byName)) {
			allocs := byName[name]
			if allocs == nil {
				continue
			}
			for e := allocs.Back(); e != nil; e = e.Prev() { // oldest first
				info, ok := e.Value.(*dynamicplugins.PluginInfo)
				order++
				if !ok || info == nil || info.ConnectionInfo == nil {
					b.log.Warn("skipping a stored plugin that is not a registration", "type", ptype, "name", name)
					continue
				}
				if err := b.put(records, info, order); err != nil {
					b.log.Warn("skipping a stored plugin plugvisor refuses", "type", ptype, "name", name, "alloc_id", info.AllocID, "error", err)
				}
			}
		}
	}
	return records
}

// put adds info's record to records.
func (b *stateBucket) put(records map[string]record, info *dynamicplugins.PluginInfo, order uint64) error {
	p, err := toPlugvisor(info)
	if err == nil {
		err = registry.ValidatePlugin(p)
	}
	if err != nil {
		return err
	}
	value, err := proto.Marshal(&messages.StoredAllocation{Plugin: p, Sequence: order})
	if err != nil {
		return err
	}
	records[p.GetType()+"\x00"+p.GetName()+"\x00"+p.GetAllocId()] = record{value: value, info: toNomad(p), order: order}
	return nil
}

// Apply applies ops to a copy of the records, writes the copy to the state
// storage and keeps it once written.
func (b *stateBucket) Apply(ops []storage.Op) error {
	if len(ops) == 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	next := maps.Clone(b.records)
	for _, op := range ops {
		key := string(op.Key)
		if op.Value == nil {
			delete(next, key)
			continue
		}
		if strings.HasPrefix(key, "\x00") { // the registry's own bookkeeping (its sequence)
			continue
		}
		var stored messages.StoredAllocation
		if err := proto.Unmarshal(op.Value, &stored); err != nil {
			return fmt.Errorf("%w: decode %q: %v", storage.ErrInvalid, key, err)
		}
		next[key] = record{value: slices.Clone(op.Value), info: toNomad(stored.GetPlugin()), order: stored.GetSequence()}
	}
	if err := b.state.PutDynamicPluginRegistryState(nomadState(next)); err != nil {
		return fmt.Errorf("nomad compat: write the registry state: %w", err)
	}
	b.records = next
	return nil
}

// nomadState lays records out as Nomad's registry keeps them.
func nomadState(records map[string]record) *dynamicplugins.RegistryState {
	all := slices.SortedFunc(maps.Values(records), func(a, b record) int { return cmp.Compare(b.order, a.order) })
	state := &dynamicplugins.RegistryState{Plugins: map[string]map[string]*list.List{}}
	for _, r := range all { // newest first
		byName, ok := state.Plugins[r.info.Type]
		if !ok {
			byName = map[string]*list.List{}
			state.Plugins[r.info.Type] = byName
		}
		allocs, ok := byName[r.info.Name]
		if !ok {
			allocs = list.New()
			byName[r.info.Name] = allocs
		}
		allocs.PushBack(r.info)
	}
	return state
}
