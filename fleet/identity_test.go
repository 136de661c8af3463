package fleet_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

// as gives a store an identity and the member address its liveness record
// shows.
func as(identity, address string) func(*fleet.Config) {
	return func(c *fleet.Config) { c.Identity, c.Address = identity, address }
}

// TestASecondAgentWithALiveNodeIDIsRefusedNamingTheFirst opens node-a
// twice, as a second agent started with a live -node-id would: the second
// Open is refused, naming the agent that holds the ID (its address, its
// process, when it started, its lease), and the first keeps its lease:
// before, the second put the liveness key under its own lease, and when
// it died the GC freed the first one's claims while the first believed it
// held them.
func TestASecondAgentWithALiveNodeIDIsRefusedNamingTheFirst(t *testing.T) {
	srv := etcdtest.Start(t)
	a := open(t, srv, "node-a", as("secret-a", "10.0.0.5:7946"))
	before := nodeOf(t, a, "node-a")

	_, err := fleet.Open(testCtx(t), fleet.Config{Endpoints: srv.Endpoints(), NodeID: "node-a", Identity: "secret-b", LeaseTTL: fleet.MinLeaseTTL})
	require.ErrorIs(t, err, fleet.ErrNodeIDTaken)
	require.ErrorIs(t, err, errclass.Conflict)
	for _, want := range []string{`node ID "node-a" is held by the agent at member address 10.0.0.5:7946`, "started ", "lease", "another -node-id"} {
		require.ErrorContains(t, err, want)
	}
	after := nodeOf(t, a, "node-a")
	require.Equal(t, before.Lease, after.Lease, "the first agent keeps its lease")
	require.Empty(t, a.IdentityLost())
	require.Equal(t, model.StandingHeld, a.Standing(time.Now()))
}

// TestAnAgentRestartedAfterAKillTakesItsNodeIDBackAtOnce kills node-a's
// agent (its lease is not revoked) and starts it again with the identity
// it keeps in its data dir: it takes the node ID at once, under a new
// lease, and the old lease is revoked.
func TestAnAgentRestartedAfterAKillTakesItsNodeIDBackAtOnce(t *testing.T) {
	srv := etcdtest.Start(t)
	killed, err := fleet.Open(testCtx(t), fleet.Config{Endpoints: srv.Endpoints(), NodeID: "node-a", Identity: "secret-a", LeaseTTL: 10 * time.Second})
	require.NoError(t, err)
	old := nodeOf(t, killed, "node-a").Lease
	fleet.Abandon(killed)

	a := open(t, srv, "node-a", as("secret-a", ""))
	now := nodeOf(t, a, "node-a")
	require.NotEqual(t, old, now.Lease)
	ttl, err := etcdClient(t, srv).TimeToLive(testCtx(t), clientv3.LeaseID(old))
	require.NoError(t, err)
	require.Equal(t, int64(-1), ttl.TTL, "the killed incarnation's lease is revoked")
}

// TestAnAgentWhoseLivenessKeyHoldsAnotherAgentFencesAtOnce writes another
// agent's record into node-a's liveness key, as a second agent that took
// the ID while node-a was cut off, or an etcd restored from a snapshot,
// leaves it: node-a's watch sees it and its standing is lost at once
// (its writers fenced), saying why, until the key is its own again.
func TestAnAgentWhoseLivenessKeyHoldsAnotherAgentFencesAtOnce(t *testing.T) {
	srv := etcdtest.Start(t)
	a := open(t, srv, "node-a", as("secret-a", ""))
	watchNode(t, a)
	other := open(t, srv, "node-x", as("secret-b", "10.0.0.9:7946"))
	c := etcdClient(t, srv)
	ctx := testCtx(t)
	resp, err := c.Get(ctx, fleet.DefaultPrefix+"nodes/node-x")
	require.NoError(t, err)
	// node-x's record, checksum and all, does not fit node-a's key: it
	// reads as an agent of unknown identity.
	_, err = c.Put(ctx, fleet.DefaultPrefix+"nodes/node-a", string(resp.Kvs[0].Value), clientv3.WithLease(clientv3.LeaseID(resp.Kvs[0].Lease)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return a.Standing(time.Now()) == model.StandingLost }, timeout, 10*time.Millisecond)
	require.Contains(t, a.IdentityLost(), `node ID "node-a" is now held by`)
	_ = other
}

// TestADeletedLivenessKeyIsPutAgain deletes node-a's liveness key while
// its lease lives, as an operator's etcdctl del: the fleet would count the
// node down, and its GC free its claims; node-a's watch puts it again.
func TestADeletedLivenessKeyIsPutAgain(t *testing.T) {
	srv := etcdtest.Start(t)
	a := open(t, srv, "node-a", as("secret-a", ""))
	watchNode(t, a)
	lease := nodeOf(t, a, "node-a").Lease
	_, err := etcdClient(t, srv).Delete(testCtx(t), fleet.DefaultPrefix+"nodes/node-a")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		up, err := a.NodeUp(testCtx(t), "node-a")
		return err == nil && up
	}, timeout, 10*time.Millisecond)
	require.Equal(t, lease, nodeOf(t, a, "node-a").Lease)
	require.Empty(t, a.IdentityLost())
}

// nodeOf is node as s lists it.
func nodeOf(t *testing.T, s *fleet.Store, node string) *fleet.Node {
	t.Helper()
	nodes, err := s.Nodes(testCtx(t))
	require.NoError(t, err)
	for _, n := range nodes {
		if n.ID == node {
			return n
		}
	}
	t.Fatalf("no node %s in %v", node, nodes)
	return nil
}

// etcdClient is a client of srv, closed with the test.
func etcdClient(t *testing.T, srv *etcdtest.Server) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: timeout})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

// TestTheOlderOfTwoAgentsSharingAnIdentityFences starts node-a twice with
// one identity, as two agents started from copies of one data dir are:
// the second takes the node ID as a restart after a kill would, and the
// first, still running, sees its key hold another start of its identity
// and fences, rather than both writing.
func TestTheOlderOfTwoAgentsSharingAnIdentityFences(t *testing.T) {
	srv := etcdtest.Start(t)
	first := open(t, srv, "node-a", as("secret-a", "10.0.0.5:7946"))
	watchNode(t, first)
	second := open(t, srv, "node-a", as("secret-a", "10.0.0.6:7946"))
	require.Eventually(t, func() bool { return first.Standing(time.Now()) == model.StandingLost }, timeout, 10*time.Millisecond)
	require.Contains(t, first.IdentityLost(), "member address 10.0.0.6:7946")
	require.Equal(t, model.StandingHeld, second.Standing(time.Now()))
}
