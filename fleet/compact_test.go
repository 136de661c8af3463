package fleet_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

// rawClient is a plain etcd client of srv, closed with the test.
func rawClient(t testing.TB, srv *etcdtest.Server) *clientv3.Client {
	t.Helper()
	client, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: timeout, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// churn claims and releases volume id through s, times times, and returns
// etcd's revision before it began.
func churn(t testing.TB, client *clientv3.Client, s *fleet.Store, id string, times int) int64 {
	t.Helper()
	ctx := testCtx(t)
	resp, err := client.Get(ctx, "revision")
	require.NoError(t, err)
	for i := range times {
		alloc := "alloc-" + s.NodeID()
		if i%2 == 0 {
			_, err = s.Claim(ctx, "", id, writeClaim(alloc, s.NodeID()))
		} else {
			_, err = s.Release(ctx, "", id, free(alloc))
		}
		require.NoError(t, err)
	}
	return resp.Header.Revision
}

// compactedPast reports whether reading at rev fails because etcd
// compacted it.
func compactedPast(t testing.TB, client *clientv3.Client, rev int64) bool {
	_, err := client.Get(testCtx(t), "revision", clientv3.WithRev(rev))
	return err == rpctypes.ErrCompacted
}

// TestOneMemberCompactsTheFleetsEtcdAndAnotherTakesOver runs a compactor
// on two members: one leads and compacts, so an old revision can no longer
// be read, and the other compacts nothing; once the leader stops, the
// other takes over and compacts the revisions written since.
func TestOneMemberCompactsTheFleetsEtcdAndAnotherTakesOver(t *testing.T) {
	srv := etcdtest.Start(t)
	client := rawClient(t, srv)
	a, b := open(t, srv, "node-a"), open(t, srv, "node-b")
	healthyNode(t, a)
	registered(t, a, volume("db", model.AccessModeSingleNodeWriter))
	start := func(s *fleet.Store) *fleet.Compactor {
		c, err := fleet.StartCompactor(s, fleet.CompactConfig{Interval: 100 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(c.Stop)
		return c
	}
	ca, cb := start(a), start(b)
	require.Eventually(t, func() bool { return ca.Leading() || cb.Leading() }, timeout, 10*time.Millisecond, "one member leads")
	leader, other := ca, cb
	if cb.Leading() {
		leader, other = cb, ca
	}

	old := churn(t, client, a, "db", 50)
	require.Eventually(t, func() bool { return compactedPast(t, client, old+10) && leader.Compacted() >= old+10 }, timeout, 20*time.Millisecond,
		"the leader compacts the history of the writes")
	require.False(t, other.Leading())
	require.Zero(t, other.Compacted(), "only the leader compacts")

	leader.Stop()
	require.Eventually(t, other.Leading, timeout, 10*time.Millisecond, "the other member takes over at once: the leader resigned")
	later := churn(t, client, a, "db", 50)
	require.Eventually(t, func() bool { return compactedPast(t, client, later+10) && other.Compacted() >= later+10 }, timeout, 20*time.Millisecond,
		"the new leader compacts")
	v, err := a.GetVolume(testCtx(t), "", "db")
	require.NoError(t, err)
	require.Empty(t, v.Claimants(), "compaction keeps the latest state")
}

func TestStartCompactorRefusesANegativeInterval(t *testing.T) {
	_, err := fleet.StartCompactor(nil, fleet.CompactConfig{Interval: -time.Second})
	require.ErrorIs(t, err, model.ErrInvalid)
	require.Contains(t, err.Error(), "Interval")
}

// TestACompactorStopsWhileEtcdIsDown stops a compactor whose etcd is gone:
// the stop waits for no etcd call.
func TestACompactorStopsWhileEtcdIsDown(t *testing.T) {
	t.Parallel() // mostly waiting for etcd to stop
	srv := etcdtest.Start(t)
	a := open(t, srv, "node-a")
	c, err := fleet.StartCompactor(a, fleet.CompactConfig{Interval: 100 * time.Millisecond})
	require.NoError(t, err)
	require.Eventually(t, c.Leading, timeout, 10*time.Millisecond)
	srv.Stop()
	stopped := make(chan struct{})
	go func() { c.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(timeout):
		t.Fatal("the compactor did not stop while etcd was down")
	}
	srv.Restart()
}
