package fleet_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

// listed is what a node list says of one node, but for its lease.
type listed struct {
	Up, Draining bool
	Claims       []fleet.NodeClaim
	Attachments  []fleet.NodeAttachment
}

// listedBy is s's node list, by node.
func listedBy(t *testing.T, s *fleet.Store) map[string]listed {
	t.Helper()
	out := map[string]listed{}
	for _, n := range nodesOf(t, s) {
		out[n.ID] = listed{Up: n.Up, Draining: !n.DrainingSince.IsZero(), Claims: n.Claims, Attachments: n.Attachments}
	}
	return out
}

// listedFromVolumes is the node list as it was built before the node
// index, from every volume in ids (read one by one, in ID order), the
// nodes in up that are up and the nodes in draining: the answer the index
// must give.
func listedFromVolumes(t *testing.T, s *fleet.Store, ids, up []string, draining map[string]bool) map[string]listed {
	t.Helper()
	out := map[string]listed{}
	for _, node := range up {
		isUp, err := s.NodeUp(testCtx(t), node)
		require.NoError(t, err)
		if isUp {
			out[node] = listed{Up: true}
		}
	}
	for node := range draining {
		n := out[node]
		n.Draining = true
		out[node] = n
	}
	for _, id := range slices.Sorted(slices.Values(ids)) {
		v, err := s.GetVolume(testCtx(t), "", id)
		require.NoError(t, err)
		for _, c := range v.AllClaims() {
			n := out[c.NodeID]
			n.Claims = append(n.Claims, fleet.NodeClaim{Namespace: v.Namespace, VolumeID: v.ID, AllocID: c.AllocID, Mode: c.Mode, State: c.State})
			out[c.NodeID] = n
		}
		for _, node := range slices.Sorted(maps.Keys(v.Attachments)) {
			a := v.Attachments[node]
			n := out[node]
			n.Attachments = append(n.Attachments, fleet.NodeAttachment{Namespace: v.Namespace, VolumeID: v.ID, ExternalNodeID: a.ExternalNodeID, State: a.State})
			out[node] = n
		}
	}
	return out
}

// TestNodeListAnswersAsTheVolumesDoAcrossClaimsReleasesGCAndDrains
// changes claims and attachments on five volumes from three nodes, through
// releases, a node's death and the GC freeing its claims, a drain forced
// free and its end, and checks after every step that the node list, from
// two members, says what reading every volume says.
func TestNodeListAnswersAsTheVolumesDoAcrossClaimsReleasesGCAndDrains(t *testing.T) {
	srv := etcdtest.Start(t)
	admin, a, b := open(t, srv, "admin"), open(t, srv, "node-a"), open(t, srv, "node-b")
	c := leavingNode(t, srv, "node-c")
	for _, s := range []*fleet.Store{a, b, c} {
		healthyNode(t, s)
	}
	ctx := testCtx(t)
	ids := []string{"v0", "v1", "v2", "v3", "single"}
	for _, id := range ids[:4] {
		registered(t, admin, volume(id, model.AccessModeMultiNodeMultiWriter))
	}
	registered(t, admin, volume("single", model.AccessModeSingleNodeWriter))
	gc := steppedGC(t, admin)
	draining := map[string]bool{}
	now := time.Now()
	ok := func(_ any, err error) { t.Helper(); require.NoError(t, err) }
	attach := func(s *fleet.Store, id string) {
		ok(s.Attach(ctx, "", id, &model.Attachment{NodeID: s.NodeID(), ExternalNodeID: "csi-" + s.NodeID(), State: model.AttachmentStateAttached}))
	}

	steps := []struct {
		name string
		do   func()
	}{
		{"no claim yet", func() {}},
		{"claims from three nodes", func() {
			ok(a.Claim(ctx, "", "v0", writeClaim("web-1", "node-a")))
			ok(a.Claim(ctx, "", "v0", readClaim("web-2", "node-a")))
			ok(b.Claim(ctx, "", "v0", writeClaim("api-1", "node-b")))
			ok(b.Claim(ctx, "", "v1", readClaim("api-1", "node-b")))
			ok(c.Claim(ctx, "", "v2", writeClaim("job-1", "node-c")))
			ok(c.Claim(ctx, "", "v3", readClaim("job-2", "node-c")))
			ok(a.Claim(ctx, "", "single", writeClaim("db-1", "node-a")))
		}},
		{"attachments", func() {
			attach(a, "v0")
			attach(b, "v0")
			attach(a, "single")
			attach(c, "v2")
		}},
		{"a release on its way, one done", func() {
			ok(a.Release(ctx, "", "v0", &model.Claim{AllocID: "web-2", NodeID: "node-a", State: model.ClaimStateUnpublishing}))
			ok(b.Release(ctx, "", "v1", free("api-1")))
		}},
		{"a detach", func() { ok(b.Detach(ctx, "", "v0", "node-b")) }},
		{"node c dies", func() { fleet.Abandon(c) }},
		{"the GC sees node c down", func() {
			require.Eventually(t, func() bool { up, err := admin.NodeUp(ctx, "node-c"); return err == nil && !up }, timeout, 50*time.Millisecond)
			ok(gc.Step(ctx, now))
		}},
		{"the GC frees node c's claims", func() {
			freed, err := gc.Step(ctx, now.Add(time.Minute))
			require.NoError(t, err)
			require.Len(t, freed, 2)
		}},
		{"node a drains", func() { ok(b.Drain(ctx, "node-a")); draining["node-a"] = true }},
		{"node a's claims are freed by force", func() { ok(b.FreeNodeClaims(ctx, "node-a")) }},
		{"node a is eligible again and claims", func() {
			ok(b.Undrain(ctx, "node-a"))
			delete(draining, "node-a")
			ok(a.Claim(ctx, "", "v3", writeClaim("web-3", "node-a")))
		}},
		{"the single-node volume is detached and another node takes it", func() {
			ok(a.Detach(ctx, "", "single", "node-a"))
			ok(b.Claim(ctx, "", "single", writeClaim("api-2", "node-b")))
		}},
	}
	for _, step := range steps {
		step.do()
		want := listedFromVolumes(t, admin, ids, []string{"admin", "node-a", "node-b", "node-c"}, draining)
		for _, s := range []*fleet.Store{admin, b} {
			require.Equal(t, want, listedBy(t, s), "%s, listed by %s", step.name, s.NodeID())
		}
	}
	require.Contains(t, listedBy(t, admin), "node-c", "node c's attachment keeps it listed")
}

// TestNodeListReadsNoVolumeThatNoNodeHolds puts a record that does not
// decode under a volume no node claims or is attached to, after the first
// node list checked the index: the node list, which reads only the
// volumes its index names, answers as before.
func TestNodeListReadsNoVolumeThatNoNodeHolds(t *testing.T) {
	srv, s := fleetWithDB(t, model.AccessModeMultiNodeMultiWriter, "node-a")
	a := s[0]
	ctx := testCtx(t)
	_, err := a.Claim(ctx, "", "db", writeClaim("web-1", "node-a"))
	require.NoError(t, err)
	require.Len(t, nodesOf(t, a), 1)
	raw := rawClient(t, srv)
	_, err = raw.Put(ctx, "/plugvisor/volumes/default/unclaimed", "not a record")
	require.NoError(t, err)

	nodes := nodesOf(t, a)
	require.Len(t, nodes, 1)
	require.Equal(t, []fleet.NodeClaim{{Namespace: "default", VolumeID: "db", AllocID: "web-1", Mode: model.ClaimModeWrite, State: model.ClaimStateTaken}}, nodes[0].Claims)
}

// TestNodeListFillsInTheNodeIndexOfAFleetWrittenBeforeIt takes the node
// index (and the note that it was checked) out of a fleet with claims and
// attachments, as a fleet written before the index holds none: the first
// node list checks the index against the volumes, fills it in, and
// answers as the volumes do; the next one does not check it again.
func TestNodeListFillsInTheNodeIndexOfAFleetWrittenBeforeIt(t *testing.T) {
	srv := etcdtest.Start(t)
	a, b := open(t, srv, "node-a"), open(t, srv, "node-b")
	healthyNode(t, a)
	healthyNode(t, b)
	ctx := testCtx(t)
	var ids []string
	for i := range 30 {
		id := fmt.Sprintf("v%02d", i)
		ids = append(ids, id)
		registered(t, a, volume(id, model.AccessModeMultiNodeMultiWriter))
		_, err := a.Claim(ctx, "", id, writeClaim("web-"+id, "node-a"))
		require.NoError(t, err)
		if i%3 == 0 {
			_, err = b.Claim(ctx, "", id, readClaim("api-"+id, "node-b"))
			require.NoError(t, err)
			_, err = b.Attach(ctx, "", id, &model.Attachment{NodeID: "node-b", ExternalNodeID: "csi-b", State: model.AttachmentStateAttached})
			require.NoError(t, err)
		}
	}
	raw := rawClient(t, srv)
	for _, prefix := range []string{"/plugvisor/claims/", "/plugvisor/attachments/", "/plugvisor/nodeindex"} {
		_, err := raw.Delete(ctx, prefix, clientv3.WithPrefix())
		require.NoError(t, err)
	}

	want := listedFromVolumes(t, a, ids, []string{"node-a", "node-b"}, nil)
	require.Equal(t, want, listedBy(t, b), "the first list, which fills in the index")
	claims, err := raw.Get(ctx, "/plugvisor/claims/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	require.EqualValues(t, 30+10, claims.Count, "the claim index is back")
	checked, err := raw.Get(ctx, "/plugvisor/nodeindex")
	require.NoError(t, err)
	require.Len(t, checked.Kvs, 1, "the index is noted as checked")

	require.Equal(t, want, listedBy(t, a), "the next list, from the index")
	again, err := raw.Get(ctx, "/plugvisor/nodeindex")
	require.NoError(t, err)
	require.Equal(t, checked.Kvs[0].ModRevision, again.Kvs[0].ModRevision, "the index is checked once")
}

// TestAMalformedNodeIndexKeyIsSkippedByTheNodeListAndDeletedByTheCheck:
// a key under the claim index that names no volume is skipped by the node
// list, which answers as before and names the key and the remedy in a
// warning; the index check deletes it.
func TestAMalformedNodeIndexKeyIsSkippedByTheNodeListAndDeletedByTheCheck(t *testing.T) {
	srv, a, logs, ctx := loggedNode(t)
	registered(t, a, volume("db", model.AccessModeSingleNodeWriter))
	_, err := a.Claim(ctx, "", "db", writeClaim("web-1", "node-a"))
	require.NoError(t, err)
	want := listedBy(t, a)

	raw := rawClient(t, srv)
	const bad = "/plugvisor/claims/node-a/default"
	_, err = raw.Put(ctx, bad, "")
	require.NoError(t, err)
	require.Equal(t, want, listedBy(t, a), "the list skips the key: it names no volume")
	require.Contains(t, logs.String(), bad, "a warning names the key")
	require.Contains(t, logs.String(), "etcdctl del", "and the remedy")

	_, err = raw.Delete(ctx, "/plugvisor/nodeindex")
	require.NoError(t, err)
	require.Equal(t, want, listedBy(t, a), "the check deleted the key, and the list answers as before")
	gone, err := raw.Get(ctx, bad, clientv3.WithCountOnly())
	require.NoError(t, err)
	require.Zero(t, gone.Count)
}

// TestAMalformedKeyUnderADownNodeIsWarnedAboutOncePerGCPass puts a key that
// names no volume under a down node's claims: GC reads it when it lists the
// nodes and again when it frees the node's claims, and warns once a pass.
func TestAMalformedKeyUnderADownNodeIsWarnedAboutOncePerGCPass(t *testing.T) {
	srv := etcdtest.Start(t)
	var logs probe.LogBuffer
	b := open(t, srv, "node-b", logTo(&logs))
	a := leavingNodeWithDB(t, srv, model.AccessModeSingleNodeWriter, writeClaim)
	ctx := testCtx(t)
	const bad = "/plugvisor/claims/node-a/default"
	_, err := rawClient(t, srv).Put(ctx, bad, "")
	require.NoError(t, err)
	require.NoError(t, a.Close(), "leaving revokes the lease: node a is down at once")

	gc := steppedGC(t, b)
	warnings := func() int { return strings.Count(logs.String(), "skipping a malformed key in the node index") }
	now := time.Now()
	for i, after := range []time.Duration{0, time.Minute, 2 * time.Minute} {
		before := warnings()
		freed, err := gc.Step(ctx, now.Add(after))
		require.NoError(t, err)
		require.Equal(t, 1, warnings()-before, "pass %d, %v after node a was seen down", i, after)
		if after == time.Minute {
			require.Equal(t, []fleet.Freed{{Namespace: "default", VolumeID: "db", AllocID: "alloc-a", NodeID: "node-a"}}, freed)
		}
	}
	require.Contains(t, logs.String(), bad)
}
