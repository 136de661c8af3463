package fleet

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
)

// The volume indexes make a registration read and guard a fixed number of
// keys, whatever the number of volumes. Both are written in the
// transaction of the volume they follow:
//
//   - pluginvolumes/<plugin>/<plugin volume ID> holds "<shard> <key>": the
//     key of the catalog volume that holds the plugin volume
//     (model.PluginVolumeTaken), and the count shard it is counted in;
//   - volumecount/<shard>, countShards of them, count the volumes
//     (Config.MaxVolumes). Shard k may count at most shardRoom(k) volumes;
//     the rooms add up to the limit.
//
// The count cannot pass the limit under concurrency: a new volume is
// counted in a shard with room, in a transaction that compares that
// shard's mod revision with the one it read, so of two transactions that
// read one shard only the first commits; the other reads the counts again
// and decides again. No shard passes its room, so the sum never passes the
// limit. Registrations that pick different shards do not collide; they
// only meet on the last shards with room, near the limit.
//
// Open makes sure the counts are there (buildIndexes): a fleet whose
// volumes were written before the indexes gets them then, once.

// countShards is the number of count shards.
const countShards = 16

// shardRoom is how many volumes shard k may count.
func (s *Store) shardRoom(k int) int64 {
	room := s.cfg.MaxVolumes / countShards
	if k < s.cfg.MaxVolumes%countShards {
		room++
	}
	return int64(room)
}

// indexWrite is what a change of a volume from old to next (nil: absent)
// does to the indexes: the compares its transaction needs and the writes
// it adds. A change that keeps the volume's plugin volume and neither
// creates nor removes the volume (a claim, a release, an attachment) reads
// nothing and adds nothing; the others read the plugin volume entries
// concerned and the count shards, in one round trip. A new plugin volume
// held by another volume is refused with model.ErrVolumeConflict, a new
// volume beyond Config.MaxVolumes with model.ErrVolumeLimit.
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
	reads := []clientv3.Op{clientv3.OpGet(s.keys.volumeCounts(), clientv3.WithPrefix())}
	for _, key := range []string{oldKey, newKey} {
		if key != "" {
			reads = append(reads, clientv3.OpGet(key))
		}
	}
	resp, err := s.client.Txn(ctx).Then(reads...).Commit()
	if err != nil {
		return nil, nil, etcdErr(err)
	}
	got := map[string]*mvccpb.KeyValue{}
	for _, r := range resp.Responses {
		for _, kv := range r.GetResponseRange().GetKvs() {
			got[string(kv.Key)] = kv
		}
	}
	w := indexChange{codec: s.codec}
	shard, err := s.dropPluginVolume(&w, old, got[oldKey], oldKey != newKey)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case counted && next != nil:
		shard, err = s.countIn(&w, next, got)
	case counted:
		err = s.countOut(&w, shard, got)
	}
	if err == nil && newKey != oldKey {
		err = s.takePluginVolume(ctx, &w, next, got[newKey], shard)
	}
	if err != nil {
		return nil, nil, err
	}
	return w.cmps, w.ops, nil
}

// indexChange collects the compares and writes of indexWrite; codec
// encodes its records.
type indexChange struct {
	codec codec
	cmps  []clientv3.Cmp
	ops   []clientv3.Op
}

// unchanged guards key (kv as read, nil when absent).
func (w *indexChange) unchanged(key string, kv *mvccpb.KeyValue) {
	rev := int64(0)
	if kv != nil {
		rev = kv.ModRevision
	}
	w.cmps = append(w.cmps, clientv3.Compare(clientv3.ModRevision(key), "=", rev))
}

// put writes value, sealed, under key.
func (w *indexChange) put(key string, value *wrapperspb.StringValue) error {
	sealed, err := w.codec.encode(key, value)
	if err == nil {
		w.ops = append(w.ops, clientv3.OpPut(key, sealed))
	}
	return err
}

// putInt writes n, sealed, under key.
func (w *indexChange) putInt(key string, n int64) error {
	sealed, err := w.codec.encode(key, wrapperspb.Int64(n))
	if err == nil {
		w.ops = append(w.ops, clientv3.OpPut(key, sealed))
	}
	return err
}

// dropPluginVolume returns the shard that old is counted in, from its
// plugin volume entry (kv as read; -1 when there is none of old's), and
// removes the entry when the plugin volume is no longer old's (moved).
func (s *Store) dropPluginVolume(w *indexChange, old *model.CSIVolume, kv *mvccpb.KeyValue, moved bool) (int, error) {
	if old == nil || kv == nil {
		return -1, nil
	}
	shard, holder, err := s.decodeEntry(kv)
	if err != nil || holder != s.keys.volume(old.Namespace, old.ID) {
		return -1, err
	}
	if moved {
		w.unchanged(string(kv.Key), kv)
		w.ops = append(w.ops, clientv3.OpDelete(string(kv.Key)))
	}
	return shard, nil
}

// takePluginVolume points next's plugin volume entry (kv as read) at next,
// counted in shard, unless another volume holds it. An entry whose volume
// is gone or holds another plugin volume now is stale (a hand edit or a
// restore can leave one): it is taken over, guarded on that volume.
func (s *Store) takePluginVolume(ctx context.Context, w *indexChange, next *model.CSIVolume, kv *mvccpb.KeyValue, shard int) error {
	if next == nil {
		return nil
	}
	key, self := s.keys.pluginVolume(next.PluginID, next.PluginVolumeID()), s.keys.volume(next.Namespace, next.ID)
	w.unchanged(key, kv)
	if err := w.put(key, entryValue(max(shard, 0), self)); err != nil || kv == nil {
		return err
	}
	_, holder, err := s.decodeEntry(kv)
	if err != nil || holder == self {
		return err
	}
	resp, err := s.client.Get(ctx, holder)
	if err != nil {
		return etcdErr(err)
	}
	if held := firstKV(resp.Kvs); held != nil {
		v, err := s.decodeVolume(held)
		if err != nil {
			return err
		}
		if err := model.PluginVolumeTaken(next, []*model.CSIVolume{v}); err != nil {
			return err
		}
	}
	w.unchanged(holder, firstKV(resp.Kvs))
	return nil
}

// counts decodes the count shards as read (in got): each one's count,
// their sum, and the shards with room.
func (s *Store) counts(got map[string]*mvccpb.KeyValue) (counts []int64, total int64, room []int, err error) {
	counts = make([]int64, countShards)
	for k := range countShards {
		kv := got[s.keys.volumeCount(k)]
		if kv == nil {
			return nil, 0, nil, fmt.Errorf("%w: etcd key %q, a shard of the fleet's volume count, is missing; restart an agent: it counts the volumes again when it starts",
				model.ErrCorrupt, s.keys.volumeCount(k))
		}
		if counts[k], err = s.decodeCount(kv); err != nil {
			return nil, 0, nil, err
		}
		total += counts[k]
		if counts[k] < s.shardRoom(k) {
			room = append(room, k)
		}
	}
	return counts, total, room, nil
}

// countIn counts the new volume next in a shard with room, picked at
// random, and returns the shard; with no room left it refuses next.
func (s *Store) countIn(w *indexChange, next *model.CSIVolume, got map[string]*mvccpb.KeyValue) (int, error) {
	counts, total, room, err := s.counts(got)
	if err != nil {
		return -1, err
	}
	if len(room) == 0 {
		return -1, model.VolumeLimitError(next.Namespace, next.ID, int(total))
	}
	shard := room[rand.N(len(room))]
	return shard, s.putCount(w, shard, counts[shard]+1, got)
}

// countOut takes a removed volume off shard, the one it was counted in
// (none when -1). It needs the shards there even then: a volume removed
// while buildIndexes counts it would stay counted.
func (s *Store) countOut(w *indexChange, shard int, got map[string]*mvccpb.KeyValue) error {
	counts, _, _, err := s.counts(got)
	if err != nil || shard < 0 || shard >= countShards {
		return err
	}
	return s.putCount(w, shard, max(counts[shard]-1, 0), got)
}

// putCount writes n to shard, guarded on the shard as read.
func (s *Store) putCount(w *indexChange, shard int, n int64, got map[string]*mvccpb.KeyValue) error {
	key := s.keys.volumeCount(shard)
	w.unchanged(key, got[key])
	return w.putInt(key, n)
}

// entryValue is the value of a plugin volume entry: the shard the volume
// is counted in and the volume's key.
func entryValue(shard int, volumeKey string) *wrapperspb.StringValue {
	return wrapperspb.String(strconv.Itoa(shard) + " " + volumeKey)
}

// decodeEntry is the shard and the volume key of a plugin volume entry.
func (s *Store) decodeEntry(kv *mvccpb.KeyValue) (int, string, error) {
	var value wrapperspb.StringValue
	if err := s.decode(string(kv.Key), kv.Value, &value); err != nil {
		return -1, "", err
	}
	shardText, holder, _ := strings.Cut(value.GetValue(), " ")
	shard, err := strconv.Atoi(shardText)
	if err != nil || !strings.HasPrefix(holder, s.keys.volumes()) {
		return -1, "", corrupt(string(kv.Key), fmt.Errorf("it holds %q, not a count shard and a volume key", value.GetValue()))
	}
	return shard, holder, nil
}

// decodeCount is the count a count shard holds.
func (s *Store) decodeCount(kv *mvccpb.KeyValue) (int64, error) {
	var count wrapperspb.Int64Value
	if err := s.decode(string(kv.Key), kv.Value, &count); err != nil {
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
// indexes (no count shard) its indexes, once: it reads every volume, puts
// their plugin volume entries in batches (volume i in shard i mod
// countShards), then the count shards, in a transaction that holds only if
// no volume changed or appeared meanwhile and no shard is there yet; else
// it starts again. It reads nothing more when the shards are there. Every
// agent of the fleet must run this version: an older one writes volumes
// without their entries.
func (s *Store) buildIndexes(ctx context.Context) error {
	for {
		have, err := s.client.Get(ctx, s.keys.volumeCounts(), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || have.Count > 0 {
			return etcdErr(err)
		}
		resp, err := s.client.Get(ctx, s.keys.volumes(), clientv3.WithPrefix())
		if err != nil {
			return etcdErr(err)
		}
		w := indexChange{codec: s.codec}
		for i, kv := range resp.Kvs {
			v, err := s.decodeVolume(kv)
			if err != nil {
				return err
			}
			if err := w.put(s.keys.pluginVolume(v.PluginID, v.PluginVolumeID()), entryValue(i%countShards, string(kv.Key))); err != nil {
				return err
			}
		}
		for start := 0; start < len(w.ops); start += indexBatch {
			if _, err := s.client.Txn(ctx).Then(w.ops[start:min(start+indexBatch, len(w.ops))]...).Commit(); err != nil {
				return etcdErr(err)
			}
		}
		shards := indexChange{codec: s.codec}
		for k := range countShards {
			n := len(resp.Kvs)/countShards + min(1, max(0, len(resp.Kvs)%countShards-k))
			if err := shards.putInt(s.keys.volumeCount(k), int64(n)); err != nil {
				return err
			}
		}
		done, err := s.client.Txn(ctx).If(
			clientv3.Compare(clientv3.CreateRevision(s.keys.volumeCounts()), "=", 0).WithPrefix(),
			clientv3.Compare(clientv3.ModRevision(s.keys.volumes()), "<", resp.Header.Revision+1).WithPrefix(),
		).Then(shards.ops...).Commit()
		if err != nil {
			return etcdErr(err)
		}
		if done.Succeeded {
			s.log.Info("built the volume indexes", "volumes", len(resp.Kvs))
			return nil
		}
	}
}
