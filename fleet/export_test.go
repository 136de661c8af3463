package fleet

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
)

// Abandon stops s the way a crashed node stops: the lease is no longer
// kept alive but not revoked, so etcd counts the node down only once the
// lease expires. Close after it returns nil and does nothing.
func Abandon(s *Store) {
	s.closeOnce.Do(func() {
		s.lease.stop()
		s.closeErr = s.client.Close()
	})
}

// Fill writes the volumes vols into s's fleet as registrations would, with
// their index entries and counts, and as they are, claims and attachments
// included, with their node index, in transactions of up to fillOps
// writes: the benchmarks' quick way to a large fleet (no catalog rules, no
// volume limit). The fleet holds no volume yet of those IDs or plugin
// volumes.
func Fill(ctx context.Context, s *Store, vols []*model.CSIVolume) error {
	const fillOps = 120 // etcd takes 128 operations in one transaction
	for start := 0; start < len(vols); {
		resp, err := s.client.Get(ctx, s.keys.volumeCounts(), clientv3.WithPrefix())
		if err != nil {
			return err
		}
		got := map[string]*mvccpb.KeyValue{}
		for _, kv := range resp.Kvs {
			got[string(kv.Key)] = kv
		}
		counts, _, _, err := s.counts(got)
		if err != nil {
			return err
		}
		w := indexChange{codec: s.codec}
		for ; start < len(vols); start++ {
			v := vols[start]
			key := s.keys.volume(v.Namespace, v.ID)
			value, err := s.codec.encode(key, v.Proto())
			if err != nil {
				return err
			}
			ops := append([]clientv3.Op{clientv3.OpPut(key, value)}, s.indexOps(v.Namespace, v.ID, nil, v)...)
			if len(w.ops)+len(ops)+1+countShards > fillOps {
				if len(w.ops) == 0 {
					return fmt.Errorf("fleet: Fill: volume %s/%s alone needs more than %d writes", v.Namespace, v.ID, fillOps)
				}
				break
			}
			w.ops = append(w.ops, ops...)
			shard := start % countShards
			counts[shard]++
			if err := w.put(s.keys.pluginVolume(v.PluginID, v.PluginVolumeID()), entryValue(shard, key)); err != nil {
				return err
			}
		}
		for k, n := range counts {
			if err := w.putInt(s.keys.volumeCount(k), n); err != nil {
				return err
			}
		}
		if _, err := s.client.Txn(ctx).Then(w.ops...).Commit(); err != nil {
			return err
		}
	}
	return nil
}

// NodeWatchProbe starts a node watch's view of s's node (its read of the
// node's claim index, as WatchNode's start does) without following it,
// and returns the probe the watch runs once a quarter lease TTL.
func NodeWatchProbe(ctx context.Context, s *Store) (func(context.Context) string, error) {
	w := &nodeWatch{s: s}
	w.fresh()
	if _, err := w.start(ctx); err != nil {
		return nil, err
	}
	return w.probe, nil
}

// NodeWatchKeys are the keys the probe of s's node reads: the node's key
// and its claim index's prefix.
func NodeWatchKeys(s *Store) (node, claims string) {
	return s.keys.node(s.cfg.NodeID), s.keys.claimsOf(s.cfg.NodeID)
}
