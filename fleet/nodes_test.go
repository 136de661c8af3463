package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/messages"
)

// counts are a plugin's health counts as seen from s; a plugin no live
// node runs has none.
type counts struct{ controllers, nodes int }

func countsOf(t testing.TB, s *fleet.Store, plugin string) counts {
	t.Helper()
	plugins, err := s.Plugins(testCtx(t))
	require.NoError(t, err)
	for _, p := range plugins {
		if p.ID == plugin {
			return counts{p.ControllersHealthy, p.NodesHealthy}
		}
	}
	return counts{}
}

// TestHealthCountsFollowPluginsAcrossThreeNodes has plugins come and go on
// three nodes and checks the counts every node sees after each step.
func TestHealthCountsFollowPluginsAcrossThreeNodes(t *testing.T) {
	srv := etcdtest.Start(t)
	a, b, c := open(t, srv, "node-a"), open(t, srv, "node-b"), open(t, srv, "node-c")
	all := []*fleet.Store{a, b, c}
	ctx := testCtx(t)
	put := func(s *fleet.Store, fps ...*messages.CSIFingerprint) { require.NoError(t, s.PutFingerprints(ctx, fps)) }

	steps := []struct {
		name string
		do   func()
		want counts
	}{
		{"nothing runs the plugin", func() {}, counts{}},
		{"a healthy node plugin on node a", func() { put(a, nodePlugin("ebs", "p1", true)) }, counts{0, 1}},
		{"another on node b", func() { put(b, nodePlugin("ebs", "p2", true)) }, counts{0, 2}},
		{"node c runs the controller and an unhealthy node plugin", func() {
			put(c, controllerPlugin("ebs", "p3", true), nodePlugin("ebs", "p3", false))
		}, counts{1, 2}},
		{"node b's plugin turns unhealthy", func() { put(b, nodePlugin("ebs", "p2", false)) }, counts{1, 1}},
		{"node c's node plugin recovers", func() {
			put(c, controllerPlugin("ebs", "p3", true), nodePlugin("ebs", "p3", true))
		}, counts{1, 2}},
		{"node c's controller goes away", func() { put(c, nodePlugin("ebs", "p3", true)) }, counts{0, 2}},
		{"node a's plugin is replaced by a newer alloc, healthy", func() { put(a, nodePlugin("ebs", "p4", true)) }, counts{0, 2}},
		{"node a leaves the fleet", func() { require.NoError(t, a.Close()) }, counts{0, 1}},
	}
	registered(t, b, volume("db", model.AccessModeMultiNodeReader))
	put(b, nodePlugin("nfs", "other", true)) // another plugin (until node b puts its own), which the volume's read leaves out
	for _, step := range steps {
		step.do()
		for _, s := range all[1:] {
			require.Equal(t, step.want, countsOf(t, s, "ebs"), "%s, seen from %s", step.name, s.NodeID())
			v, err := s.GetVolume(ctx, "", "db")
			require.NoError(t, err)
			require.Equal(t, step.want, counts{v.Health.ControllersHealthy, v.Health.NodesHealthy},
				"%s: the volume's own read of its plugin's fingerprints, seen from %s", step.name, s.NodeID())
		}
	}
	plugins, err := b.Plugins(ctx)
	require.NoError(t, err)
	require.Len(t, plugins, 1)
	require.NotContains(t, plugins[0].Nodes, "node-a", "a node that left has no fingerprint")
	require.Equal(t, "p3", plugins[0].Nodes["node-c"].AllocID)
}

func TestABadFingerprintIsRefusedAndChangesNothing(t *testing.T) {
	srv := etcdtest.Start(t)
	s := open(t, srv, "node-a")
	healthyNode(t, s)
	err := s.PutFingerprints(testCtx(t), []*messages.CSIFingerprint{nodePlugin("ebs", "p9", false), {Type: "csi-node", Name: "../x", AllocId: "a"}})
	require.ErrorIs(t, err, model.ErrInvalid)
	require.Equal(t, counts{0, 1}, countsOf(t, s, "ebs"))
}

// TestADeadNodeDropsOutButKeepsItsClaimsUntilGCFreesThem lets a node's
// lease expire (the node stops without leaving) and checks that it leaves
// the health counts at once, that its write claim stays and keeps another
// node out, and that GC frees it only once the node has been down for the
// grace period.
func TestADeadNodeDropsOutButKeepsItsClaimsUntilGCFreesThem(t *testing.T) {
	t.Parallel() // mostly waiting for etcd to stop or a lease to run out
	a, b, ctx := twoHealthyNodes(t)
	registered(t, a, volume("db", model.AccessModeSingleNodeWriter))
	_, err := a.Claim(ctx, "", "db", writeClaim("alloc-a", "node-a"))
	require.NoError(t, err)
	gc := steppedGC(t, b)
	now := time.Now()
	freed, err := gc.Step(ctx, now)
	require.NoError(t, err)
	require.Empty(t, freed, "node a is up")

	fleet.Abandon(a)
	require.Eventually(t, func() bool { return countsOf(t, b, "ebs") == counts{0, 1} }, timeout, 50*time.Millisecond,
		"node a drops out of the counts once its 2 s lease expires")

	for _, after := range []time.Duration{0, 30 * time.Second, time.Minute - time.Nanosecond} {
		freed, err := gc.Step(ctx, now.Add(after))
		require.NoError(t, err)
		require.Empty(t, freed, "node a has been down for %v, less than the grace", after)
		v, err := b.GetVolume(ctx, "", "db")
		require.NoError(t, err)
		require.Contains(t, v.WriteClaims, "alloc-a", "a dead node's claim stays until GC frees it")
		_, err = b.Claim(ctx, "", "db", writeClaim("alloc-b", "node-b"))
		require.ErrorIs(t, err, csi.ErrClaimRefused)
	}

	freed, err = gc.Step(ctx, now.Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, []fleet.Freed{{Namespace: "default", VolumeID: "db", AllocID: "alloc-a", NodeID: "node-a"}}, freed)
	v, err := b.Claim(ctx, "", "db", writeClaim("alloc-b", "node-b"))
	require.NoError(t, err)
	require.Equal(t, []string{"alloc-b"}, v.Claimants())
}

// TestGCLeavesTheClaimsOfANodeThatCameBack takes a node down long enough
// for GC to note it, brings it back, and checks that GC frees nothing.
func TestGCLeavesTheClaimsOfANodeThatCameBack(t *testing.T) {
	srv := etcdtest.Start(t)
	b := open(t, srv, "node-b")
	a := leavingNodeWithDB(t, srv, model.AccessModeMultiNodeMultiWriter, writeClaim)
	ctx := testCtx(t)
	gc := steppedGC(t, b)

	require.NoError(t, a.Close(), "leaving revokes the lease: node a is down at once")
	now := time.Now()
	freed, err := gc.Step(ctx, now)
	require.NoError(t, err)
	require.Empty(t, freed)
	open(t, srv, "node-a")
	freed, err = gc.Step(ctx, now.Add(time.Hour))
	require.NoError(t, err)
	require.Empty(t, freed, "node a is up again")
	v, err := b.GetVolume(ctx, "", "db")
	require.NoError(t, err)
	require.Contains(t, v.WriteClaims, "alloc-a")
}

func TestStartGCRefusesNegativeDurations(t *testing.T) {
	_, err := fleet.StartGC(nil, fleet.GCConfig{Grace: -time.Second})
	require.ErrorIs(t, err, model.ErrInvalid)
	require.Contains(t, err.Error(), "Grace")
}

// TestGCRunsByItselfAtItsInterval starts GC with an interval and a grace
// shorter than the test, and waits for it to free a dead node's claim.
func TestGCRunsByItselfAtItsInterval(t *testing.T) {
	srv := etcdtest.Start(t)
	b := open(t, srv, "node-b")
	a := leavingNodeWithDB(t, srv, model.AccessModeMultiNodeMultiWriter, readClaim)
	require.NoError(t, a.Close())

	gc, err := fleet.StartGC(b, fleet.GCConfig{Interval: 20 * time.Millisecond, Grace: 100 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(gc.Stop)
	require.Eventually(t, func() bool {
		v, err := b.GetVolume(context.Background(), "", "db")
		return err == nil && !v.InUse()
	}, timeout, 20*time.Millisecond)
}

// TestAMalformedClaimIndexKeyOfADownNodeKeepsTheGCFromNoOtherNode puts a
// key that names no volume under the claim index of a down node: the GC
// skips it with a warning naming it, and frees that node's claims and
// those of the down nodes after it.
func TestAMalformedClaimIndexKeyOfADownNodeKeepsTheGCFromNoOtherNode(t *testing.T) {
	srv, a, logs, ctx := loggedNode(t)
	for _, id := range []string{"db", "logs"} {
		registered(t, a, volume(id, model.AccessModeMultiNodeMultiWriter))
	}
	for node, id := range map[string]string{"node-b": "db", "node-c": "logs"} {
		s, err := fleet.Open(ctx, fleet.Config{Endpoints: srv.Endpoints(), NodeID: node, LeaseTTL: fleet.MinLeaseTTL})
		require.NoError(t, err)
		_, err = s.Claim(ctx, "", id, writeClaim("alloc-"+node, node))
		require.NoError(t, err)
		require.NoError(t, s.Close(), "leaving revokes the lease: the node is down at once")
	}
	const bad = "/plugvisor/claims/node-b/default"
	_, err := rawClient(t, srv).Put(ctx, bad, "")
	require.NoError(t, err)

	gc := steppedGC(t, a)
	now := time.Now()
	freed, err := gc.Step(ctx, now)
	require.NoError(t, err)
	require.Empty(t, freed)
	freed, err = gc.Step(ctx, now.Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, []fleet.Freed{
		{Namespace: "default", VolumeID: "db", AllocID: "alloc-node-b", NodeID: "node-b"},
		{Namespace: "default", VolumeID: "logs", AllocID: "alloc-node-c", NodeID: "node-c"},
	}, freed)
	require.Contains(t, logs.String(), bad, "a warning names the key")
}
