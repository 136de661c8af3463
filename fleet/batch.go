package fleet

import (
	"context"
	"math/rand/v2"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
)

// Batches (model.BatchFleet): the volumes of a batch change in one
// transaction, guarded on each volume's record, each plugin volume entry
// concerned and each count shard it writes, as a single registration's is
// (index.go). The count shards are read once and counted for the whole
// batch, so each shard is written once, with the batch's count.

// etcdMaxTxnOps is etcd's default limit of operations (and of compares)
// in one transaction (--max-txn-ops).
const etcdMaxTxnOps = 128

// batchCmpsPerVolume is the most keys a batch transaction guards for one
// volume: its record, its old and new plugin volume entries, and the
// holder of a stale entry.
const batchCmpsPerVolume = 4

// A batch of model.MaxBatch volumes fits one transaction: this does not
// compile when it would not.
const _ = uint(etcdMaxTxnOps - countShards - batchCmpsPerVolume*model.MaxBatch)

// batchItem is one volume of a batch: its key, the volume as read (nil
// when absent) with its mod revision, and what it becomes.
type batchItem struct {
	ns, id    string
	old, next *model.CSIVolume
	rev       int64
	// oldKey and newKey are its plugin volume entries before and after
	// ("" for none).
	oldKey, newKey string
}

// changed reports whether the item writes its volume.
func (b *batchItem) changed() bool { return b.next != b.old }

// counted reports whether the item creates or removes its volume.
func (b *batchItem) counted() bool { return (b.old == nil) != (b.next == nil) }

// RegisterVolumes registers vs by the catalog's rules (model.RegisterOver,
// the plugin volumes' uniqueness, the volume limit), all of them or none,
// in one transaction, and returns them as registered, in order. A refusal
// names its item (model.BatchItemError).
func (s *Store) RegisterVolumes(ctx context.Context, vs []*model.CSIVolume) ([]*model.CSIVolume, error) {
	if err := model.CheckRegisterBatch(vs); err != nil {
		return nil, err
	}
	items := make([]*batchItem, len(vs))
	for i, v := range vs {
		ns, err := model.VolumeKey(v.Namespace, v.ID)
		if err != nil {
			return nil, model.BatchItemError(i, v.ID, err)
		}
		items[i] = &batchItem{ns: ns, id: v.ID}
	}
	plugins, err := s.registeredPlugins(ctx, vs)
	if err != nil {
		return nil, err
	}
	if err := model.TopologyRefusal(vs, plugins, true); err != nil {
		return nil, err
	}
	err = s.updateBatch(ctx, "register volumes", items, func(i int, old *model.CSIVolume) (*model.CSIVolume, error) {
		return model.RegisterOver(old, vs[i])
	})
	if err != nil {
		return nil, err
	}
	// Each health follows its plugin's counts as read before the write.
	out := make([]*model.CSIVolume, len(items))
	for i, b := range items {
		out[i] = b.next.Copy()
		out[i].Health = model.PluginHealth(plugins[b.next.PluginID])
	}
	return out, nil
}

// DeregisterVolumes forgets the volumes ids of namespace by the catalog's
// rules (model.DeregisterOf), all of them or none, in one transaction. A
// refusal names its item.
func (s *Store) DeregisterVolumes(ctx context.Context, namespace string, ids []string) error {
	if err := model.CheckDeregisterBatch(namespace, ids); err != nil {
		return err
	}
	items := make([]*batchItem, len(ids))
	for i, id := range ids {
		ns, err := model.VolumeKey(namespace, id)
		if err != nil {
			return model.BatchItemError(i, id, err)
		}
		items[i] = &batchItem{ns: ns, id: id}
	}
	return s.updateBatch(ctx, "deregister volumes", items, func(i int, old *model.CSIVolume) (*model.CSIVolume, error) {
		if old == nil {
			return nil, model.NotFound(items[i].ns, items[i].id)
		}
		return nil, model.DeregisterOf(old)
	})
}

// updateBatch applies rule to each item (rule gets the item's index and
// its volume as read) and writes every change in one transaction, trying
// again when another writer changed a key it read, as update does. Each
// item's next is set once it returns nil.
func (s *Store) updateBatch(ctx context.Context, what string, items []*batchItem,
	rule func(int, *model.CSIVolume) (*model.CSIVolume, error)) error {
	return s.call(ctx, what, func(ctx context.Context) error {
		for attempt := range s.cfg.MaxAttempts {
			if attempt > 0 && backOff(ctx, attempt) != nil {
				return s.lostRaces(what, items[0].ns, items[0].id, attempt)
			}
			won, err := s.attemptBatch(ctx, items, rule)
			if err != nil || won {
				return err
			}
		}
		return s.lostRaces(what, items[0].ns, items[0].id, s.cfg.MaxAttempts)
	})
}

// attemptBatch is one read, change and compare-and-write of updateBatch;
// it reports whether the write won (or nothing was to write).
func (s *Store) attemptBatch(ctx context.Context, items []*batchItem,
	rule func(int, *model.CSIVolume) (*model.CSIVolume, error)) (bool, error) {
	if err := s.readBatch(ctx, items, rule); err != nil {
		return false, err
	}
	got, err := s.readBatchIndexes(ctx, items)
	if err != nil {
		return false, err
	}
	w := indexChange{codec: s.codec}
	if err := s.indexBatch(ctx, &w, items, got); err != nil {
		return false, err
	}
	for _, b := range items {
		if !b.changed() {
			continue
		}
		key := s.keys.volume(b.ns, b.id)
		w.cmps = append(w.cmps, clientv3.Compare(clientv3.ModRevision(key), "=", b.rev))
		write := clientv3.OpDelete(key)
		if b.next != nil {
			value, err := s.codec.encode(key, b.next.Proto())
			if err != nil {
				return false, err
			}
			write = clientv3.OpPut(key, value)
		}
		w.ops = append(append(w.ops, write), s.indexOps(b.ns, b.id, b.old, b.next)...)
	}
	if len(w.ops) == 0 {
		return true, nil
	}
	wctx, failed := sending(ctx)
	resp, err := s.client.Txn(wctx).If(w.cmps...).Then(w.ops...).Commit()
	if err != nil {
		return false, failed(err)
	}
	if !resp.Succeeded {
		return false, nil
	}
	for _, b := range items {
		if b.changed() && b.next != nil {
			b.next = b.next.Copy()
			b.next.ModifyIndex = uint64(resp.Header.Revision)
			if b.old == nil {
				b.next.CreateIndex = b.next.ModifyIndex
			}
		}
	}
	return true, nil
}

// readBatch reads the items' volumes in one round trip and applies rule to
// each; the first refusal, named by its item, ends the batch.
func (s *Store) readBatch(ctx context.Context, items []*batchItem, rule func(int, *model.CSIVolume) (*model.CSIVolume, error)) error {
	reads := make([]clientv3.Op, len(items))
	for i, b := range items {
		reads[i] = clientv3.OpGet(s.keys.volume(b.ns, b.id))
	}
	resp, err := s.client.Txn(ctx).Then(reads...).Commit()
	if err != nil {
		return etcdErr(err)
	}
	for i, b := range items {
		b.old, b.rev, b.oldKey, b.newKey = nil, 0, "", ""
		if kv := firstKV(resp.Responses[i].GetResponseRange().GetKvs()); kv != nil {
			if b.old, err = s.decodeVolume(kv); err != nil {
				return err
			}
			b.rev = kv.ModRevision
			b.oldKey = s.keys.pluginVolume(b.old.PluginID, b.old.PluginVolumeID())
		}
		if b.next, err = rule(i, b.old); err != nil {
			return model.BatchItemError(i, b.id, err)
		}
		if b.next != nil {
			b.newKey = s.keys.pluginVolume(b.next.PluginID, b.next.PluginVolumeID())
		}
	}
	return nil
}

// readBatchIndexes refuses a batch whose items meet on a plugin volume
// entry, and reads the entries the items change and the count shards in
// one round trip.
func (s *Store) readBatchIndexes(ctx context.Context, items []*batchItem) (map[string]*mvccpb.KeyValue, error) {
	reads := []clientv3.Op{clientv3.OpGet(s.keys.volumeCounts(), clientv3.WithPrefix())}
	touched := map[string]int{}
	for i, b := range items {
		if !b.changed() || b.oldKey == b.newKey && !b.counted() {
			continue
		}
		for _, key := range []string{b.oldKey, b.newKey} {
			if key == "" {
				continue
			}
			if j, ok := touched[key]; ok && j != i {
				return nil, model.BatchItemError(i, b.id, batchMeetError(items[j], b))
			}
			touched[key] = i
			reads = append(reads, clientv3.OpGet(key))
		}
	}
	resp, err := s.client.Txn(ctx).Then(reads...).Commit()
	if err != nil {
		return nil, etcdErr(err)
	}
	got := map[string]*mvccpb.KeyValue{}
	for _, r := range resp.Responses {
		for _, kv := range r.GetResponseRange().GetKvs() {
			got[string(kv.Key)] = kv
		}
	}
	return got, nil
}

// batchMeetError is the refusal of b, whose plugin volume another item of
// its batch, before it, takes or gives up.
func batchMeetError(before, b *batchItem) error {
	if before.next != nil && b.next != nil && before.newKey == b.newKey {
		return model.PluginVolumeTaken(b.next, []*model.CSIVolume{before.next})
	}
	return model.Refusef(model.ErrVolumeConflict,
		"its plugin volume moves to or from volume %s/%s of the same batch; register the two in separate batches", before.ns, before.id)
}

// indexBatch adds to w what the items do to the indexes (see indexWrite):
// the plugin volume entries of each, and the count shards once for all.
func (s *Store) indexBatch(ctx context.Context, w *indexChange, items []*batchItem, got map[string]*mvccpb.KeyValue) error {
	var counts []int64
	touched := map[int]bool{}
	for i, b := range items {
		if !b.changed() || b.oldKey == b.newKey && !b.counted() {
			continue
		}
		shard, err := s.dropPluginVolume(w, b.old, got[b.oldKey], b.oldKey != b.newKey)
		if err == nil && b.counted() && counts == nil {
			counts, _, _, err = s.counts(got)
		}
		switch {
		case err != nil:
		case b.counted() && b.next != nil:
			if shard, err = s.countInBatch(counts, b.next); err == nil {
				touched[shard] = true
			}
		case b.counted() && shard >= 0 && shard < countShards:
			counts[shard], touched[shard] = max(counts[shard]-1, 0), true
		}
		if err == nil && b.newKey != b.oldKey {
			err = s.takePluginVolume(ctx, w, b.next, got[b.newKey], shard)
		}
		if err != nil {
			return model.BatchItemError(i, b.id, err)
		}
	}
	for shard := range countShards {
		if touched[shard] {
			if err := s.putCount(w, shard, counts[shard], got); err != nil {
				return err
			}
		}
	}
	return nil
}

// countInBatch counts the new volume next in a shard with room, picked at
// random, in counts; with no room left it refuses next.
func (s *Store) countInBatch(counts []int64, next *model.CSIVolume) (int, error) {
	var room []int
	var total int64
	for k, n := range counts {
		total += n
		if n < s.shardRoom(k) {
			room = append(room, k)
		}
	}
	if len(room) == 0 {
		return -1, model.VolumeLimitError(next.Namespace, next.ID, int(total))
	}
	shard := room[rand.N(len(room))]
	counts[shard]++
	return shard, nil
}
