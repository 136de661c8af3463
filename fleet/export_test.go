package fleet

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

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
// their index entries and count, in transactions of a few dozen volumes:
// the benchmarks' quick way to a large fleet. The fleet holds no volume
// yet of those IDs or plugin volumes.
func Fill(ctx context.Context, s *Store, vols []*model.CSIVolume) error {
	const batch = 40
	for start := 0; start < len(vols); start += batch {
		var ops []clientv3.Op
		for _, v := range vols[start:min(start+batch, len(vols))] {
			key := s.keys.volume(v.Namespace, v.ID)
			value, err := encodeRecord(key, v.Proto())
			if err != nil {
				return err
			}
			entry := s.keys.pluginVolume(v.PluginID, v.PluginVolumeID())
			holder, err := encodeRecord(entry, wrapperspb.String(key))
			if err != nil {
				return err
			}
			ops = append(ops, clientv3.OpPut(key, value), clientv3.OpPut(entry, holder))
		}
		resp, err := s.client.Get(ctx, s.keys.volumeCount())
		if err != nil {
			return err
		}
		count, err := s.decodeCount(resp.Kvs[0])
		if err != nil {
			return err
		}
		value, err := encodeRecord(s.keys.volumeCount(), wrapperspb.Int64(count+int64(len(ops)/2)))
		if err != nil {
			return err
		}
		if _, err := s.client.Txn(ctx).Then(append(ops, clientv3.OpPut(s.keys.volumeCount(), value))...).Commit(); err != nil {
			return err
		}
	}
	return nil
}
