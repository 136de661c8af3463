package fleet

import (
	"context"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/plugvisor/plugvisor/csi/catalog"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
)

// The volume indexes make a registration read and guard a fixed number of
// keys, whatever the number of volumes. Both are written in the
// transaction of the volume they follow:
//
//   - pluginvolumes/<plugin>/<plugin volume ID> holds the key of the catalog
//     volume that holds the plugin volume (catalog.PluginVolumeTaken);
//   - volumecount holds how many volumes the fleet has (Config.MaxVolumes).
//
// Open makes sure the count is there (buildIndexes): a fleet whose volumes
// were written before the indexes gets them then, once.

// indexWrite is what a change of a volume from old to next (nil: absent)
// does to the indexes: the compares its transaction needs and the writes
// it adds. A change that keeps the volume's plugin volume and neither
// creates nor removes the volume (a claim, a release, an attachment) reads
// nothing and adds nothing. A new plugin volume held by another volume is
// refused with catalog.ErrVolumeConflict, a new volume beyond
// Config.MaxVolumes with catalog.ErrVolumeLimit.
//
// The count cannot pass the limit under concurrency: every transaction
// that creates or removes a volume compares the count key's mod revision
// with the one it read, so of two such transactions started on one count
// only the first commits; the other reads the new count and decides again.
func (s *Store) indexWrite(ctx context.Context, old, next *model.CSIVolume) ([]clientv3.Cmp, []clientv3.Op, error) {
	var oldKey, newKey string
	if old != nil {
		oldKey = s.keys.pluginVolume(old.PluginID, old.PluginVolumeID())
	}
	if next != nil {
		newKey = s.keys.pluginVolume(next.PluginID, next.PluginVolumeID())
	}
	counted := (old == nil) != (next == nil)
	if oldKey == newKey && !counted {
		return nil, nil, nil
	}
	reads := []clientv3.Op{clientv3.OpGet(s.keys.volumeCount())}
	for _, key := range []string{oldKey, newKey} {
		if key != "" {
			reads = append(reads, clientv3.OpGet(key))
		}
	}
	resp, err := s.client.Txn(ctx).Then(reads...).Commit()
	if err != nil {
		return nil, nil, etcdErr(err)
	}
	got := make(map[string]*mvccpb.KeyValue, len(reads))
	for _, r := range resp.Responses {
		for _, kv := range r.GetResponseRange().GetKvs() {
			got[string(kv.Key)] = kv
		}
	}
	w := indexChange{}
	if oldKey != newKey {
		if err := s.dropPluginVolume(&w, old, got[oldKey]); err != nil {
			return nil, nil, err
		}
		if err := s.takePluginVolume(ctx, &w, next, got[newKey]); err != nil {
			return nil, nil, err
		}
	}
	if counted {
		if err := s.countVolume(&w, next, got[s.keys.volumeCount()]); err != nil {
			return nil, nil, err
		}
	}
	return w.cmps, w.ops, nil
}

// indexChange collects the compares and writes of indexWrite.
type indexChange struct {
	cmps []clientv3.Cmp
	ops  []clientv3.Op
}

// unchanged guards key (kv as read, nil when absent).
func (w *indexChange) unchanged(key string, kv *mvccpb.KeyValue) {
	rev := int64(0)
	if kv != nil {
		rev = kv.ModRevision
	}
	w.cmps = append(w.cmps, clientv3.Compare(clientv3.ModRevision(key), "=", rev))
}

// dropPluginVolume removes old's plugin volume entry (kv), when it is old's.
func (s *Store) dropPluginVolume(w *indexChange, old *model.CSIVolume, kv *mvccpb.KeyValue) error {
	if old == nil || kv == nil {
		return nil
	}
	holder, err := s.decodeHolder(kv)
	if err != nil || holder != s.keys.volume(old.Namespace, old.ID) {
		return err
	}
	w.unchanged(string(kv.Key), kv)
	w.ops = append(w.ops, clientv3.OpDelete(string(kv.Key)))
	return nil
}

// takePluginVolume points next's plugin volume entry (kv as read) at next,
// unless another volume holds it. An entry whose volume is gone or holds
// another plugin volume now is stale (a build at Open that raced with a
// deregistration leaves one): it is taken over, guarded on that volume.
func (s *Store) takePluginVolume(ctx context.Context, w *indexChange, next *model.CSIVolume, kv *mvccpb.KeyValue) error {
	if next == nil {
		return nil
	}
	key, self := s.keys.pluginVolume(next.PluginID, next.PluginVolumeID()), s.keys.volume(next.Namespace, next.ID)
	w.unchanged(key, kv)
	value, err := encodeRecord(key, wrapperspb.String(self))
	if err != nil {
		return err
	}
	w.ops = append(w.ops, clientv3.OpPut(key, value))
	if kv == nil {
		return nil
	}
	holder, err := s.decodeHolder(kv)
	if err != nil || holder == self {
		return err
	}
	resp, err := s.client.Get(ctx, holder)
	if err != nil {
		return etcdErr(err)
	}
	var held *model.CSIVolume
	if len(resp.Kvs) > 0 {
		if held, err = s.decodeVolume(resp.Kvs[0]); err != nil {
			return err
		}
		if err := catalog.PluginVolumeTaken(next, []*model.CSIVolume{held}); err != nil {
			return err
		}
	}
	w.unchanged(holder, firstKV(resp.Kvs))
	return nil
}

// countVolume adds one to the count (kv as read) for a new volume next,
// refusing it at the limit, or takes one off for a removed one.
func (s *Store) countVolume(w *indexChange, next *model.CSIVolume, kv *mvccpb.KeyValue) error {
	key := s.keys.volumeCount()
	if kv == nil {
		return fmt.Errorf("%w: etcd key %q, the fleet's volume count, is missing; restart an agent: it counts the volumes again when it starts",
			catalog.ErrCatalogCorrupt, key)
	}
	count, err := s.decodeCount(kv)
	if err != nil {
		return err
	}
	if next != nil && count >= int64(s.cfg.MaxVolumes) {
		return catalog.VolumeLimitError(next.Namespace, next.ID, int(count))
	}
	count--
	if next != nil {
		count += 2
	}
	value, err := encodeRecord(key, wrapperspb.Int64(max(count, 0)))
	if err != nil {
		return err
	}
	w.unchanged(key, kv)
	w.ops = append(w.ops, clientv3.OpPut(key, value))
	return nil
}

// decodeHolder is the volume key a plugin volume entry points at.
func (s *Store) decodeHolder(kv *mvccpb.KeyValue) (string, error) {
	var holder wrapperspb.StringValue
	if err := decodeRecord(string(kv.Key), kv.Value, &holder); err != nil {
		return "", err
	}
	if !strings.HasPrefix(holder.GetValue(), s.keys.volumes()) {
		return "", corrupt(string(kv.Key), fmt.Errorf("it points at %q, not a volume", holder.GetValue()))
	}
	return holder.GetValue(), nil
}

// decodeCount is the volume count kv holds.
func (s *Store) decodeCount(kv *mvccpb.KeyValue) (int64, error) {
	var count wrapperspb.Int64Value
	if err := decodeRecord(string(kv.Key), kv.Value, &count); err != nil {
		return 0, err
	}
	return count.GetValue(), nil
}

// firstKV is the first of kvs, or nil.
func firstKV(kvs []*mvccpb.KeyValue) *mvccpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	return kvs[0]
}

// indexBatch bounds the puts of one transaction of buildIndexes, under
// etcd's default limit of 128 operations per transaction.
const indexBatch = 100

// buildIndexes gives a fleet whose volumes were written without the
// indexes (no count key) its indexes, once: it reads every volume, puts
// their plugin volume entries in batches, then the count, in a
// transaction that holds only if no volume changed meanwhile and no count
// is there yet; else it starts again. It reads nothing more when the count
// is there. Every agent of the fleet must run this version: an older one
// writes volumes without their entries.
func (s *Store) buildIndexes(ctx context.Context) error {
	for {
		have, err := s.client.Get(ctx, s.keys.volumeCount(), clientv3.WithCountOnly())
		if err != nil || have.Count > 0 {
			return etcdErr(err)
		}
		resp, err := s.client.Get(ctx, s.keys.volumes(), clientv3.WithPrefix())
		if err != nil {
			return etcdErr(err)
		}
		var puts []clientv3.Op
		for _, kv := range resp.Kvs {
			v, err := s.decodeVolume(kv)
			if err != nil {
				return err
			}
			key := s.keys.pluginVolume(v.PluginID, v.PluginVolumeID())
			value, err := encodeRecord(key, wrapperspb.String(string(kv.Key)))
			if err != nil {
				return err
			}
			puts = append(puts, clientv3.OpPut(key, value))
		}
		for start := 0; start < len(puts); start += indexBatch {
			if _, err := s.client.Txn(ctx).Then(puts[start:min(start+indexBatch, len(puts))]...).Commit(); err != nil {
				return etcdErr(err)
			}
		}
		count, err := encodeRecord(s.keys.volumeCount(), wrapperspb.Int64(int64(len(resp.Kvs))))
		if err != nil {
			return err
		}
		done, err := s.client.Txn(ctx).If(
			clientv3.Compare(clientv3.CreateRevision(s.keys.volumeCount()), "=", 0),
			clientv3.Compare(clientv3.ModRevision(s.keys.volumes()), "<", resp.Header.Revision+1).WithPrefix(),
		).Then(clientv3.OpPut(s.keys.volumeCount(), count)).Commit()
		if err != nil {
			return etcdErr(err)
		}
		if done.Succeeded {
			s.log.Info("built the volume indexes", "volumes", len(resp.Kvs))
			return nil
		}
	}
}
