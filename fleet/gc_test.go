package fleet_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/messages"
)

// keysUnder lists the keys under prefix.
func keysUnder(t testing.TB, client *clientv3.Client, prefix string) []string {
	t.Helper()
	resp, err := client.Get(testCtx(t), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	require.NoError(t, err)
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, string(kv.Key))
	}
	return out
}

// TestTheNodeIndexFollowsEveryClaimAndAttachment checks the index keys
// written in the same transaction as the volume: a node's claim and
// attachment put them, their release and detach delete them, and so does
// a deregistration.
func TestTheNodeIndexFollowsEveryClaimAndAttachment(t *testing.T) {
	srv := etcdtest.Start(t)
	client := rawClient(t, srv)
	a, b := open(t, srv, "node-a"), open(t, srv, "node-b")
	healthyNode(t, a)
	ctx := testCtx(t)
	registered(t, a, volume("shared", model.AccessModeMultiNodeMultiWriter))
	_, err := a.Claim(ctx, "", "shared", writeClaim("alloc-a", "node-a"))
	require.NoError(t, err)
	_, err = b.Claim(ctx, "", "shared", readClaim("alloc-b", "node-b"))
	require.NoError(t, err)
	_, err = b.Claim(ctx, "", "shared", readClaim("alloc-b2", "node-b"))
	require.NoError(t, err)
	_, err = a.Attach(ctx, "", "shared", attached("node-a"))
	require.NoError(t, err)
	require.Equal(t, []string{"/plugvisor/claims/node-a/default/shared", "/plugvisor/claims/node-b/default/shared"},
		keysUnder(t, client, "/plugvisor/claims/"))
	require.Equal(t, []string{"/plugvisor/attachments/node-a/default/shared"}, keysUnder(t, client, "/plugvisor/attachments/"))

	_, err = b.Release(ctx, "", "shared", free("alloc-b"))
	require.NoError(t, err)
	require.Len(t, keysUnder(t, client, "/plugvisor/claims/node-b/"), 1, "node b still claims through alloc-b2")
	_, err = b.Release(ctx, "", "shared", free("alloc-b2"))
	require.NoError(t, err)
	require.Empty(t, keysUnder(t, client, "/plugvisor/claims/node-b/"))
	_, err = a.Detach(ctx, "", "shared", "node-a")
	require.NoError(t, err)
	require.Empty(t, keysUnder(t, client, "/plugvisor/attachments/"))
	_, err = a.Release(ctx, "", "shared", free("alloc-a"))
	require.NoError(t, err)
	require.Empty(t, keysUnder(t, client, "/plugvisor/claims/"))
}

// startGC starts a GC that runs by itself on s, stopped with the test. Its
// interval is an hour: whatever it does within the test, the watch on the
// nodes' liveness woke it.
func startGC(t testing.TB, s *fleet.Store, grace time.Duration) *fleet.GC {
	t.Helper()
	gc, err := fleet.StartGC(s, fleet.GCConfig{Interval: time.Hour, Grace: grace})
	require.NoError(t, err)
	t.Cleanup(gc.Stop)
	return gc
}

// leaderOf waits for one of gcs to lead and returns it and the others.
func leaderOf(t testing.TB, gcs ...*fleet.GC) (*fleet.GC, []*fleet.GC) {
	t.Helper()
	require.Eventually(t, func() bool { return slices.ContainsFunc(gcs, (*fleet.GC).Leading) }, timeout, 10*time.Millisecond)
	i := slices.IndexFunc(gcs, (*fleet.GC).Leading)
	return gcs[i], slices.Delete(slices.Clone(gcs), i, i+1)
}

// claimedBy waits until the volume's claimants are want.
func claimedBy(t testing.TB, s *fleet.Store, id string, want ...string) {
	t.Helper()
	require.Eventually(t, func() bool {
		v, err := s.GetVolume(context.Background(), "", id)
		return err == nil && slices.Equal(v.Claimants(), want)
	}, timeout, 20*time.Millisecond, "the claimants of %s become %v", id, want)
}

// TestOneGCLeadsTheFleetWokenByTheNodeWatch runs a GC on two nodes, with
// an interval longer than the test: one leads, frees the claims of a node
// that left once the grace has passed, and keeps those of a node that is
// up; when it stops, the other leads and frees those of the next node that
// leaves. The leader first puts the node index right: a claim whose index
// key is missing (as in a fleet older than the index) is found too, and
// stale keys go.
func TestOneGCLeadsTheFleetWokenByTheNodeWatch(t *testing.T) {
	srv := etcdtest.Start(t)
	client := rawClient(t, srv)
	a, b := open(t, srv, "node-a"), open(t, srv, "node-b")
	c := open(t, srv, "node-c")
	healthyNode(t, a)
	ctx := testCtx(t)
	for _, id := range []string{"v1", "v2"} {
		registered(t, a, volume(id, model.AccessModeMultiNodeMultiWriter))
		for _, s := range []*fleet.Store{a, c} {
			_, err := s.Claim(ctx, "", id, writeClaim("alloc-"+s.NodeID()+"-"+id, s.NodeID()))
			require.NoError(t, err)
		}
	}
	_, err := client.Delete(ctx, "/plugvisor/claims/node-c/default/v2")
	require.NoError(t, err)
	for _, stale := range []string{"/plugvisor/claims/node-x/default/gone", "/plugvisor/attachments/node-a/default/v1"} {
		_, err = client.Put(ctx, stale, "")
		require.NoError(t, err)
	}

	leader, others := leaderOf(t, startGC(t, a, 300*time.Millisecond), startGC(t, b, 300*time.Millisecond))
	want := []string{"/plugvisor/claims/node-a/default/v1", "/plugvisor/claims/node-a/default/v2",
		"/plugvisor/claims/node-c/default/v1", "/plugvisor/claims/node-c/default/v2"}
	require.Eventually(t, func() bool {
		return slices.Equal(want, keysUnder(t, client, "/plugvisor/claims/")) && len(keysUnder(t, client, "/plugvisor/attachments/")) == 0
	}, timeout, 20*time.Millisecond, "the leader puts the index right: the missing key is put, the stale ones deleted")
	require.NoError(t, c.Close())
	claimedBy(t, a, "v1", "alloc-node-a-v1")
	claimedBy(t, a, "v2", "alloc-node-a-v2")
	require.Empty(t, keysUnder(t, client, "/plugvisor/claims/node-c/"))

	leader.Stop()
	next, _ := leaderOf(t, others...)
	require.NotSame(t, leader, next)
	d := open(t, srv, "node-d")
	_, err = d.Claim(ctx, "", "v1", writeClaim("alloc-d", "node-d"))
	require.NoError(t, err)
	require.NoError(t, d.Close())
	claimedBy(t, a, "v1", "alloc-node-a-v1")
	require.Len(t, keysUnder(t, client, "/plugvisor/claims/"), 2, "node a's claims stay")
}

// detachLog records the detaches of the Detachers of a test.
type detachLog struct {
	mu   sync.Mutex
	done []string // node that detached: volume/attached node
}

// startDetacher runs a Detacher on s that controls plugin "ebs" and
// detaches by forgetting the attachment, as the volume manager does once
// the controller answered.
func (l *detachLog) startDetacher(t testing.TB, s *fleet.Store) {
	t.Helper()
	d, err := fleet.StartDetacher(s, fleet.DetacherConfig{
		Interval: time.Hour,
		Controls: func(plugin string) bool { return plugin == "ebs" },
		Detach: func(ctx context.Context, st fleet.Stranded) error {
			l.mu.Lock()
			l.done = append(l.done, s.NodeID()+": "+st.VolumeID+"/"+st.Attachment.NodeID)
			l.mu.Unlock()
			_, err := s.Detach(ctx, st.Namespace, st.VolumeID, st.Attachment.NodeID)
			return err
		},
	})
	require.NoError(t, err)
	t.Cleanup(d.Stop)
}

func (l *detachLog) detaches() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.done)
}

// TestAStrandedAttachmentIsDetachedOnceByANodeThatRunsTheController
// attaches a volume to a node that then dies with a claim: once the GC has
// freed the claim, one of the two nodes with the plugin's controller
// detaches it, once, and a volume whose plugin has no controller here is
// left alone.
func TestAStrandedAttachmentIsDetachedOnceByANodeThatRunsTheController(t *testing.T) {
	srv := etcdtest.Start(t)
	client := rawClient(t, srv)
	a, b := open(t, srv, "node-a"), open(t, srv, "node-b")
	c := open(t, srv, "node-c")
	ctx := testCtx(t)
	require.NoError(t, a.PutFingerprints(ctx, []*messages.CSIFingerprint{nodePlugin("ebs", "plugin-a", true), nodePlugin("nfs", "nfs-a", true)}))
	registered(t, a, volume("db", model.AccessModeSingleNodeWriter))
	other := volume("other", model.AccessModeSingleNodeWriter)
	other.PluginID = "nfs"
	registered(t, a, other)
	for _, id := range []string{"db", "other"} {
		_, err := c.Claim(ctx, "", id, writeClaim("alloc-c-"+id, "node-c"))
		require.NoError(t, err)
		_, err = c.Attach(ctx, "", id, attached("node-c"))
		require.NoError(t, err)
	}
	var log detachLog
	log.startDetacher(t, a)
	log.startDetacher(t, b)
	startGC(t, a, 300*time.Millisecond)
	fleet.Abandon(c)

	require.Eventually(t, func() bool {
		return len(log.detaches()) > 0 && len(keysUnder(t, client, "/plugvisor/attachments/")) == 1 &&
			len(keysUnder(t, client, "/plugvisor/detaching/")) == 0
	}, timeout, 20*time.Millisecond, "a node detaches db from node c and releases its guard")
	require.Contains(t, []string{"node-a: db/node-c", "node-b: db/node-c"}, log.detaches()[0])
	v, err := a.GetVolume(ctx, "", "db")
	require.NoError(t, err)
	require.Empty(t, v.Attachments)
	require.Empty(t, v.Claimants())
	v, err = a.GetVolume(ctx, "", "other")
	require.NoError(t, err)
	require.Contains(t, v.Attachments, "node-c", "no node here runs the nfs controller")
	require.Equal(t, []string{"/plugvisor/attachments/node-c/default/other"}, keysUnder(t, client, "/plugvisor/attachments/"))
	require.Len(t, log.detaches(), 1, "one node detached, once")
}

func TestStartDetacherRefusesAConfigWithoutItsFuncs(t *testing.T) {
	_, err := fleet.StartDetacher(nil, fleet.DetacherConfig{Detach: func(context.Context, fleet.Stranded) error { return nil }})
	require.ErrorIs(t, err, model.ErrInvalid)
	require.ErrorContains(t, err, "Controls and Detach are required")
}

// TestTheLeadingGCKeepsTheClaimsOfANodeThatCameBack takes a node down and
// brings it back within the grace: the leader saw both through its watch,
// and frees nothing once the grace has passed.
func TestTheLeadingGCKeepsTheClaimsOfANodeThatCameBack(t *testing.T) {
	srv := etcdtest.Start(t)
	a := open(t, srv, "node-a")
	c := leavingNode(t, srv, "node-c")
	healthyNode(t, a)
	ctx := testCtx(t)
	registered(t, a, volume("db", model.AccessModeMultiNodeMultiWriter))
	_, err := c.Claim(ctx, "", "db", writeClaim("alloc-c", "node-c"))
	require.NoError(t, err)
	leaderOf(t, startGC(t, a, 500*time.Millisecond))

	require.NoError(t, c.Close(), "node c leaves: its key goes at once")
	open(t, srv, "node-c")
	require.Never(t, func() bool {
		v, err := a.GetVolume(context.Background(), "", "db")
		return err != nil || !slices.Equal(v.Claimants(), []string{"alloc-c"})
	}, 2*time.Second, 50*time.Millisecond, "node c came back within the grace: its claim stays")
}
