package fleet_test

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/messages"
)

// TestARestartOfEtcdIsSurvived restarts etcd under two nodes and checks
// that the claims made before are there after, and that claims and counts
// work again.
func TestARestartOfEtcdIsSurvived(t *testing.T) {
	t.Parallel() // mostly waiting for etcd to stop or a lease to run out
	srv := etcdtest.Start(t)
	short := func(c *fleet.Config) { c.RequestTimeout = 500 * time.Millisecond }
	a, b := open(t, srv, "node-a", short), open(t, srv, "node-b", short)
	healthyNode(t, a)
	healthyNode(t, b)
	ctx := testCtx(t)
	registered(t, a, volume("db", model.AccessModeSingleNodeWriter))
	_, err := a.Claim(ctx, "", "db", writeClaim("alloc-a", "node-a"))
	require.NoError(t, err)

	srv.Restart()
	restarted := time.Now()

	for _, s := range []*fleet.Store{a, b} {
		require.Eventually(t, func() bool { return second(s.GetVolume(ctx, "", "db")) == nil }, timeout, 50*time.Millisecond,
			"%s reaches etcd again by itself", s.NodeID())
	}
	t.Logf("both nodes reached etcd %v after its restart", time.Since(restarted))
	_, err = b.Claim(ctx, "", "db", writeClaim("alloc-b", "node-b"))
	require.ErrorIs(t, err, csi.ErrClaimRefused, "node a's claim survived the restart")
	v, err := b.GetVolume(ctx, "", "db")
	require.NoError(t, err)
	require.Equal(t, []string{"alloc-a"}, v.Claimants())
	require.Equal(t, counts{0, 2}, countsOf(t, b, "ebs"))
	_, err = a.Release(ctx, "", "db", free("alloc-a"))
	require.NoError(t, err)
	_, err = b.Claim(ctx, "", "db", writeClaim("alloc-b", "node-b"))
	require.NoError(t, err)
}

// TestANodeCutOffFromEtcdRefusesClaimsAndRecovers stops etcd: every call
// fails within the request timeout with ErrFleetUnavailable and a message
// naming the endpoints; once etcd is back (after the node's lease has run
// out), claims work again and the node is counted again under a new lease.
func TestANodeCutOffFromEtcdRefusesClaimsAndRecovers(t *testing.T) {
	t.Parallel() // mostly waiting for etcd to stop or a lease to run out
	srv := etcdtest.Start(t)
	const requestTimeout = 500 * time.Millisecond
	a := open(t, srv, "node-a", func(c *fleet.Config) { c.RequestTimeout = requestTimeout })
	healthyNode(t, a)
	ctx := testCtx(t)
	registered(t, a, volume("db", model.AccessModeMultiNodeMultiWriter))
	raw, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: timeout})
	require.NoError(t, err)
	defer raw.Close()
	leaseOf := func(key string) clientv3.LeaseID {
		resp, err := raw.Get(ctx, key)
		require.NoError(t, err)
		require.Len(t, resp.Kvs, 1, key)
		return clientv3.LeaseID(resp.Kvs[0].Lease)
	}
	const nodeKey, fingerprintKey = "/plugvisor/nodes/node-a", "/plugvisor/fingerprints/node-a/csi-node/ebs"
	oldLease := leaseOf(nodeKey)
	require.Equal(t, oldLease, leaseOf(fingerprintKey))

	srv.Stop()
	calls := []struct {
		name string
		call func() error
	}{
		{"claim", func() error { return second(a.Claim(ctx, "", "db", writeClaim("alloc-1", "node-a"))) }},
		{"release", func() error { return second(a.Release(ctx, "", "db", free("alloc-1"))) }},
		{"get", func() error { return second(a.GetVolume(ctx, "", "db")) }},
		{"list", func() error { return second(a.ListVolumes(ctx, "")) }},
		{"plugins", func() error { return second(a.Plugins(ctx)) }},
		{"fingerprints", func() error {
			return a.PutFingerprints(ctx, []*messages.CSIFingerprint{nodePlugin("ebs", "plugin-node-a", true)})
		}},
	}
	for _, c := range calls {
		start := time.Now()
		err := c.call()
		require.ErrorIs(t, err, model.ErrFleetUnavailable, c.name)
		require.Less(t, time.Since(start), 10*requestTimeout, "%s fails within its request timeout (and some slack)", c.name)
		require.Contains(t, err.Error(), srv.Endpoints()[0], "%s names the endpoints", c.name)
		require.Contains(t, err.Error(), "claims are refused until etcd answers")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = a.Claim(cancelled, "", "db", writeClaim("alloc-1", "node-a"))
	require.ErrorIs(t, err, context.Canceled, "the caller's own cancellation is not an outage")

	time.Sleep(fleet.MinLeaseTTL + requestTimeout) // the lease runs out while etcd is away: nothing to probe
	srv.Restart()
	require.Eventually(t, func() bool {
		_, err := a.Claim(ctx, "", "db", writeClaim("alloc-1", "node-a"))
		return err == nil
	}, timeout, 50*time.Millisecond)
	require.Eventually(t, func() bool {
		return countsOf(t, a, "ebs") == counts{0, 1} && leaseOf(nodeKey) != oldLease
	}, timeout, 50*time.Millisecond, "the node is up under a new lease")
	newLease := leaseOf(nodeKey)
	require.Equal(t, newLease, leaseOf(fingerprintKey), "its fingerprints are put again under the new lease")
	alive, err := raw.TimeToLive(ctx, newLease)
	require.NoError(t, err)
	require.Positive(t, alive.TTL, "the new lease is kept alive")
}

// TestAnOutageIsSeenAndClearsByItselfOnceEtcdAnswers stops etcd for
// longer than the lease: a call names etcd unreachable and the node's
// standing turns lost; once etcd is back, both clear with no call but the
// lease's own, and the metrics heard each claim's outcome.
func TestAnOutageIsSeenAndClearsByItselfOnceEtcdAnswers(t *testing.T) {
	t.Parallel() // mostly waiting for a lease to run out
	srv := etcdtest.Start(t)
	metrics := newRecordedMetrics()
	a := open(t, srv, "node-a", func(c *fleet.Config) { c.RequestTimeout = 500 * time.Millisecond; c.Metrics = metrics })
	require.NoError(t, a.EtcdUnreachable())
	healthyNode(t, a)
	registered(t, a, volume("db", model.AccessModeMultiNodeMultiWriter))
	_, err := a.Claim(testCtx(t), "", "db", writeClaim("alloc-1", "node-a"))
	require.NoError(t, err)

	srv.Stop()
	_, err = a.Claim(testCtx(t), "", "db", writeClaim("alloc-2", "node-a"))
	require.ErrorIs(t, err, model.ErrFleetUnavailable)
	require.ErrorIs(t, a.EtcdUnreachable(), model.ErrFleetUnavailable)
	require.Contains(t, a.EtcdUnreachable().Error(), srv.Endpoints()[0])
	require.Eventually(t, func() bool { return a.Standing(time.Now()) == model.StandingLost }, timeout, 20*time.Millisecond)

	srv.Restart()
	require.Eventually(t, func() bool { return a.Standing(time.Now()) == model.StandingHeld && a.EtcdUnreachable() == nil },
		timeout, 20*time.Millisecond)
	require.Equal(t, map[string]int{"ok": 1, "unavailable": 1}, metrics.claimed())
	require.Positive(t, metrics.requests("claim"), "each etcd call is timed")
}

// recordedMetrics is a fleet.Metrics that counts the claims' outcomes
// and the etcd calls it hears of.
type recordedMetrics struct {
	mu     sync.Mutex
	claims map[string]int
	calls  map[string]int
}

func newRecordedMetrics() *recordedMetrics {
	return &recordedMetrics{claims: map[string]int{}, calls: map[string]int{}}
}

func (m *recordedMetrics) EtcdRequest(what string, _ time.Duration, _ error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls[what]++
}

func (m *recordedMetrics) Claimed(outcome string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.claims[outcome]++
}

func (m *recordedMetrics) GCFreed(int)     {}
func (m *recordedMetrics) GrainActivated() {}

func (m *recordedMetrics) claimed() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.claims)
}

func (m *recordedMetrics) requests(what string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls[what]
}

// TestANodeCutLongFromEtcdReconnectsSoonAfterTheCutHeals cuts a node from
// etcd through a proxy until its client has tried to reconnect eight
// times, then heals the cut: the node answers again within a few of its
// lease TTLs. gRPC's own reconnect backoff grows to two minutes, so after
// a long cut a node stayed fenced and unreachable for up to that long.
func TestANodeCutLongFromEtcdReconnectsSoonAfterTheCutHeals(t *testing.T) {
	t.Parallel() // mostly waiting for the client to try again
	srv := etcdtest.Start(t)
	proxy := srv.Proxy(t)
	const requestTimeout = 500 * time.Millisecond
	a := open(t, srv, "node-a", func(c *fleet.Config) {
		c.Endpoints, c.RequestTimeout = proxy.Endpoints(), requestTimeout
	})
	healthyNode(t, a)
	ctx := testCtx(t)
	registered(t, a, volume("db", model.AccessModeMultiNodeMultiWriter))

	proxy.Cut()
	// With gRPC's default backoff the eighth attempt comes 40 s or more
	// into the cut, and the next one 17 s after it.
	require.Eventually(t, func() bool { return proxy.Refused() >= 8 }, 2*time.Minute, 50*time.Millisecond)
	proxy.Heal()
	healed := time.Now()
	require.Eventually(t, func() bool {
		_, err := a.GetVolume(ctx, "", "db")
		return err == nil
	}, 4*fleet.MinLeaseTTL, 50*time.Millisecond, "the node reaches etcd again soon after the cut heals")
	t.Logf("answered %v after the cut healed", time.Since(healed).Round(time.Millisecond))
}
