package fleet_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

// nodeEvents records what a store's node watch reports.
type nodeEvents struct {
	mu      sync.Mutex
	claims  []model.NodeClaims
	resyncs []string
}

func (e *nodeEvents) onClaims(c model.NodeClaims) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.claims = append(e.claims, c)
}

func (e *nodeEvents) onResync(why string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.resyncs = append(e.resyncs, why)
}

// last is the latest change of volume id, and whether there is one.
func (e *nodeEvents) last(id string) (model.NodeClaims, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := len(e.claims) - 1; i >= 0; i-- {
		if e.claims[i].VolumeID == id {
			return e.claims[i], true
		}
	}
	return model.NodeClaims{}, false
}

// resynced reports whether a resync's reason holds want.
func (e *nodeEvents) resynced(want string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.ContainsFunc(e.resyncs, func(r string) bool { return strings.Contains(r, want) })
}

// watchNode starts s's node watch, stopped with the test.
func watchNode(t *testing.T, s *fleet.Store) *nodeEvents {
	t.Helper()
	e := &nodeEvents{}
	stop := s.WatchNode(fleet.NodeWatchConfig{Claims: e.onClaims, Resync: e.onResync})
	t.Cleanup(stop)
	return e
}

// waitClaims waits until the latest change of volume id names allocs.
func waitClaims(t *testing.T, e *nodeEvents, id string, allocs ...string) {
	t.Helper()
	require.Eventually(t, func() bool {
		c, ok := e.last(id)
		return ok && c.Known && slices.Equal(c.Allocs, allocs)
	}, timeout, 10*time.Millisecond, "the watch reports the claims of %v on %s", allocs, id)
}

// TestTheNodeWatchHearsEveryChangeOfItsAllocsClaims claims and releases
// volume db for two allocs of node-a, claims it on node-b, then frees
// node-a's claims as drain -force does: node-a's watch reports, after
// each change, exactly which of its allocs hold a claim, and nothing of
// node-b's. Before, a node learned that its claims were freed only at its
// next start or change of lease standing.
func TestTheNodeWatchHearsEveryChangeOfItsAllocsClaims(t *testing.T) {
	a, b := twoWithDB(t, model.AccessModeMultiNodeMultiWriter)
	e := watchNode(t, a)
	ctx := testCtx(t)
	_, err := a.Claim(ctx, "", "db", writeClaim("web-1", "node-a"))
	require.NoError(t, err)
	waitClaims(t, e, "db", "web-1")
	_, err = a.Claim(ctx, "", "db", readClaim("web-2", "node-a"))
	require.NoError(t, err)
	waitClaims(t, e, "db", "web-1", "web-2")
	_, err = a.Release(ctx, "", "db", free("web-1"))
	require.NoError(t, err)
	waitClaims(t, e, "db", "web-2")
	_, err = b.Claim(ctx, "", "db", writeClaim("web-3", "node-b"))
	require.NoError(t, err)

	_, err = b.Drain(ctx, "node-a")
	require.NoError(t, err)
	freed, err := b.FreeNodeClaims(ctx, "node-a")
	require.NoError(t, err)
	require.Len(t, freed, 1)
	waitClaims(t, e, "db")
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range e.claims {
		require.NotContains(t, c.Allocs, "web-3", "node-b's claim is not node-a's news")
	}
}

// TestTheNodeWatchResyncsWhenEtcdIsRestoredUnderIt restores etcd from a
// snapshot taken before node-a's claim, with node-a running, both as
// plugvisor's restore does it (the revision bumped and marked compacted)
// and as a plain restore does (the revision goes back): either way the
// watch says every mount must be checked again, and why.
func TestTheNodeWatchResyncsWhenEtcdIsRestoredUnderIt(t *testing.T) {
	for _, tc := range []struct {
		name string
		bump bool
		why  string
	}{
		{"bumped and marked compacted", true, "compacted"},
		{"the revision goes back", false, "revision went back"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := etcdtest.Start(t)
			a := open(t, srv, "node-a", as("secret-a", ""))
			healthyNode(t, a)
			registered(t, a, volume("db", model.AccessModeSingleNodeWriter))
			snap := filepath.Join(t.TempDir(), "fleet.db")
			_, err := fleet.SaveSnapshot(testCtx(t), fleet.Access{Endpoints: srv.Endpoints()}, snap)
			require.NoError(t, err)
			e := watchNode(t, a)
			for i := range 3 { // revisions past the snapshot's
				_, err = a.Claim(testCtx(t), "", "db", writeClaim("web-1", "node-a"))
				require.NoError(t, err)
				waitClaims(t, e, "db", "web-1")
				if i < 2 {
					_, err = a.Release(testCtx(t), "", "db", free("web-1"))
					require.NoError(t, err)
				}
			}

			srv.RestoreFrom(snap, tc.bump)
			require.Eventually(t, func() bool { return e.resynced(tc.why) }, timeout, 10*time.Millisecond,
				"the watch resyncs once etcd is restored")
		})
	}
}

// TestAQuietFleetsNodeWatchStaysFresh starts node-a's watch and lets no
// one write: its standing stays held for several lease TTLs, and again
// after etcd restarts under it. etcd sends no progress notice to a watch
// that starts after its revision now, so before, a watch started (or
// resumed) while no one wrote looked stale after a TTL, and the node
// fenced its writers until someone wrote.
func TestAQuietFleetsNodeWatchStaysFresh(t *testing.T) {
	t.Parallel() // waits out lease TTLs
	srv := etcdtest.Start(t)
	a := open(t, srv, "node-a")
	watchNode(t, a)
	heldFor := func(d time.Duration) {
		t.Helper()
		require.Eventually(t, func() bool { return a.Standing(time.Now()) == model.StandingHeld }, timeout, 10*time.Millisecond)
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(fleet.MinLeaseTTL / 20) {
			require.NotEqual(t, model.StandingLost, a.Standing(time.Now()), "a quiet fleet's watch is fresh")
		}
	}
	heldFor(3 * fleet.MinLeaseTTL)
	srv.Restart()
	heldFor(3 * fleet.MinLeaseTTL)
}

// TestAPeriodicCheckFindsARestoreItsRevisionDidNotShow restores etcd from a
// snapshot taken before node-a's claim, without a bumped revision, and
// writes past the revision the watch saw before node-a sees etcd again:
// the revision never goes back, and the periodic check too tells the node
// to check its mounts.
func TestAPeriodicCheckFindsARestoreItsRevisionDidNotShow(t *testing.T) {
	e := hiddenRestore(t, fleet.MinLeaseTTL)
	require.Eventually(t, func() bool { return e.resynced("periodic check") }, timeout, 10*time.Millisecond,
		"the periodic check asks for every mount to be checked")
}

// TestAProbeFindsARestoreItsRevisionDidNotShow is
// TestAPeriodicCheckFindsARestoreItsRevisionDidNotShow with the periodic
// check off: the watch's probe reads the node's claim index at the
// revision the watch last heard it, and finds there another history than
// the one it followed (no claim of web-1), so the watch starts again and
// every mount is checked. Before, only the periodic check, every 5
// minutes by default, found this restore.
func TestAProbeFindsARestoreItsRevisionDidNotShow(t *testing.T) {
	e := hiddenRestore(t, -1)
	require.Eventually(t, func() bool { return e.resynced("is not the one the watch saw") }, timeout, 10*time.Millisecond,
		"the probe finds the restore")
	require.False(t, e.resynced("went back"), "the revision never showed it")
}

// hiddenRestore watches node-a's claims (its periodic check every
// checkEvery), claims volume db for web-1, and cuts node-a from etcd while
// etcd is restored from a snapshot taken before the claim, without a
// bumped revision, and written past the revision node-a knew: node-a,
// back, never sees the revision go back. It returns what the watch told.
func hiddenRestore(t *testing.T, checkEvery time.Duration) *nodeEvents {
	t.Helper()
	srv := etcdtest.Start(t)
	proxy := srv.Proxy(t)
	a := open(t, srv, "node-a", as("secret-a", ""), func(c *fleet.Config) { c.Endpoints = proxy.Endpoints() })
	healthyNode(t, a)
	registered(t, a, volume("db", model.AccessModeSingleNodeWriter))
	snap := filepath.Join(t.TempDir(), "fleet.db")
	_, err := fleet.SaveSnapshot(testCtx(t), fleet.Access{Endpoints: srv.Endpoints()}, snap)
	require.NoError(t, err)
	e := &nodeEvents{}
	t.Cleanup(a.WatchNode(fleet.NodeWatchConfig{Claims: e.onClaims, Resync: e.onResync, CheckEvery: checkEvery}))
	_, err = a.Claim(testCtx(t), "", "db", writeClaim("web-1", "node-a"))
	require.NoError(t, err)
	waitClaims(t, e, "db", "web-1")

	proxy.Cut()
	srv.RestoreFrom(snap, false)
	raw, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: timeout})
	require.NoError(t, err)
	defer raw.Close()
	for i := range 20 {
		_, err := raw.Put(testCtx(t), fmt.Sprintf("/elsewhere/%d", i), "x")
		require.NoError(t, err)
	}
	proxy.Heal()
	return e
}
