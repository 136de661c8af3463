package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

// TestAWriteWhoseTimeRanOutSaysWhy runs update with a guard that stands
// for the rest of an attempt: it loses the race (another write to the
// volume) a number of times, then waits out the request timeout as an
// etcd that does not answer would. Only a time that ran out on the first
// attempt is etcd's silence; after lost races, etcd answered, and the
// error says the races were lost.
func TestAWriteWhoseTimeRanOutSaysWhy(t *testing.T) {
	// The request's time is the first attempt's wait, and must hold three
	// lost races on a loaded machine.
	s, ctx := withVolume(t, 5*time.Second, model.AccessModeMultiNodeReader)

	for _, lost := range []int{0, 3} {
		calls := 0
		guard := func(ctx context.Context, _ *model.CSIVolume) ([]clientv3.Cmp, error) {
			calls++
			if calls <= lost {
				_, err := s.RecordVolumeCapacity(context.Background(), "", "db", int64(calls)) // another writer wins
				return nil, err
			}
			<-ctx.Done()
			return nil, etcdErr(ctx.Err())
		}
		_, err := s.update(ctx, "test write", model.DefaultNamespace, "db", func(v *model.CSIVolume) (*model.CSIVolume, error) {
			next := v.Copy()
			next.CapacityBytes = 1 << 30
			return next, nil
		}, guard)
		if lost == 0 {
			require.ErrorIs(t, err, model.ErrFleetUnavailable, "the first attempt's time ran out: etcd did not answer")
			continue
		}
		require.NotErrorIs(t, err, model.ErrFleetUnavailable)
		require.ErrorIs(t, err, model.ErrStore)
		require.ErrorContains(t, err, "lost the race to other writers 3 times in a row")
	}
}

// withVolume opens a Store of node-a with requestTimeout on a new etcd,
// closed with the test, and registers volume "db" of plugin "ebs" with
// mode; the context ends with the test.
func withVolume(t *testing.T, requestTimeout time.Duration, mode model.AccessMode) (*Store, context.Context) {
	t.Helper()
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	s, err := Open(ctx, Config{Endpoints: srv.Endpoints(), NodeID: "node-a", LeaseTTL: MinLeaseTTL, RequestTimeout: requestTimeout})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	v := model.NewCSIVolume("db", 0)
	v.Namespace, v.PluginID, v.AccessMode, v.AttachmentMode = model.DefaultNamespace, "ebs", mode, model.AttachmentModeFileSystem
	_, err = s.RegisterVolume(ctx, v)
	require.NoError(t, err)
	return s, ctx
}
