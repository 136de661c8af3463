package fleet

import (
	"context"
	"slices"

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

// PutVolumes writes vs as they are, claims and attachments included, with
// their node index, 32 volumes a transaction: a fast way to fill a fleet
// for a measurement (no catalog rules, no volume limit).
func PutVolumes(ctx context.Context, s *Store, vs []*model.CSIVolume) error {
	for chunk := range slices.Chunk(vs, 32) {
		var ops []clientv3.Op
		for _, v := range chunk {
			if err := v.Validate(); err != nil {
				return err
			}
			key := s.keys.volume(v.Namespace, v.ID)
			value, err := encodeRecord(key, v.Proto())
			if err != nil {
				return err
			}
			ops = append(append(ops, clientv3.OpPut(key, value)), s.indexOps(v.Namespace, v.ID, nil, v)...)
		}
		if _, err := s.client.Txn(ctx).Then(ops...).Commit(); err != nil {
			return err
		}
	}
	return nil
}
