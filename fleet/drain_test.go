package fleet_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

// TestADrainingNodeTakesNoNewClaimUntilEligibleAgain drains node a: its
// held claim stays and may be claimed again, a new claim of its allocs is
// refused naming the drain, node b claims as before, and once a is
// eligible again it claims.
func TestADrainingNodeTakesNoNewClaimUntilEligibleAgain(t *testing.T) {
	a, b := twoWithDB(t, model.AccessModeMultiNodeMultiWriter)
	ctx := testCtx(t)
	_, err := a.Claim(ctx, "", "db", writeClaim("web-1", "node-a"))
	require.NoError(t, err)

	n, err := b.Drain(ctx, "node-a")
	require.NoError(t, err)
	require.False(t, n.DrainingSince.IsZero())
	_, err = a.Claim(ctx, "", "db", writeClaim("web-2", "node-a"))
	require.ErrorIs(t, err, csi.ErrClaimRefused)
	require.ErrorContains(t, err, `node "node-a" is draining`)
	_, err = a.Claim(ctx, "", "db", writeClaim("web-1", "node-a"))
	require.NoError(t, err, "a claim held already is no new claim")
	_, err = a.Claim(ctx, "", "db", writeClaim("web-3", "node-b"))
	require.NoError(t, err, "another node claims as before")

	was, err := a.Undrain(ctx, "node-a")
	require.NoError(t, err)
	require.True(t, was)
	_, err = a.Claim(ctx, "", "db", writeClaim("web-2", "node-a"))
	require.NoError(t, err)
	was, err = a.Undrain(ctx, "node-a")
	require.NoError(t, err)
	require.False(t, was, "an eligible node stays so")
}

// TestABadDrainIsRefusedNamingWhatIsWrongAndChangesNothing drains an
// unknown node, a node with a bad name, and a node twice, and makes an
// unknown node eligible.
func TestABadDrainIsRefusedNamingWhatIsWrongAndChangesNothing(t *testing.T) {
	srv := etcdtest.Start(t)
	a := open(t, srv, "node-a")
	ctx := testCtx(t)
	_, err := a.Drain(ctx, "node-x")
	require.ErrorIs(t, err, model.ErrNodeNotFound)
	require.ErrorContains(t, err, `the fleet knows no node "node-x" (known: node-a)`)
	_, err = a.Drain(ctx, "../a")
	require.ErrorIs(t, err, model.ErrInvalid)
	require.ErrorContains(t, err, "node ID")
	_, err = a.Drain(ctx, "node-a")
	require.NoError(t, err)
	before := nodesOf(t, a)
	_, err = a.Drain(ctx, "node-a")
	require.ErrorIs(t, err, model.ErrNodeDraining)
	require.ErrorContains(t, err, `"node-a" is already draining`)
	require.ErrorContains(t, err, "plugvisor node eligibility -enable node-a")
	require.Equal(t, before[0].DrainingSince, nodesOf(t, a)[0].DrainingSince, "the first drain's start stays")
	_, err = a.FreeNodeClaims(ctx, "node-x")
	require.ErrorIs(t, err, model.ErrNodeDraining, "only a draining node's claims are forced free")
	_, err = a.Undrain(ctx, "node-x")
	require.ErrorIs(t, err, model.ErrNodeNotFound, "eligibility of an unknown node: it answered as if done")
	require.ErrorContains(t, err, `the fleet knows no node "node-x" (known: node-a)`)
}

// TestNodesListsEachNodeWithItsLeaseClaimsAndAttachments lists a node up
// with a claim and an attachment, a node down that still holds a claim,
// and a draining node.
func TestNodesListsEachNodeWithItsLeaseClaimsAndAttachments(t *testing.T) {
	_, s := fleetWithDB(t, model.AccessModeMultiNodeMultiWriter, "node-a", "node-gone")
	a, gone := s[0], s[1]
	ctx := testCtx(t)
	_, err := a.Claim(ctx, "", "db", writeClaim("web-1", "node-a"))
	require.NoError(t, err)
	_, err = a.Attach(ctx, "", "db", &model.Attachment{NodeID: "node-a", ExternalNodeID: "csi-a", State: model.AttachmentStateAttached})
	require.NoError(t, err)
	_, err = a.Claim(ctx, "", "db", readClaim("batch-1", "node-gone"))
	require.NoError(t, err)
	require.NoError(t, gone.Close())
	_, err = a.Drain(ctx, "node-gone")
	require.NoError(t, err)

	nodes := nodesOf(t, a)
	require.Len(t, nodes, 2)
	up, down := nodes[0], nodes[1]
	require.Equal(t, "node-a", up.ID)
	require.True(t, up.Up)
	require.NotZero(t, up.Lease)
	require.Positive(t, up.LeaseTTL)
	require.True(t, up.DrainingSince.IsZero())
	require.Equal(t, []fleet.NodeClaim{{Namespace: "default", VolumeID: "db", AllocID: "web-1", Mode: model.ClaimModeWrite, State: model.ClaimStateTaken}}, up.Claims)
	require.Equal(t, []fleet.NodeAttachment{{Namespace: "default", VolumeID: "db", ExternalNodeID: "csi-a", State: model.AttachmentStateAttached}}, up.Attachments)
	require.Equal(t, "node-gone", down.ID)
	require.False(t, down.Up)
	require.Zero(t, down.Lease)
	require.False(t, down.DrainingSince.IsZero())
	require.Len(t, down.Claims, 1)

	freed, err := a.FreeNodeClaims(ctx, "node-gone")
	require.NoError(t, err)
	require.Equal(t, []fleet.Freed{{Namespace: "default", VolumeID: "db", AllocID: "batch-1", NodeID: "node-gone"}}, freed)
	v, err := a.GetVolume(ctx, "", "db")
	require.NoError(t, err)
	require.Equal(t, []string{"web-1"}, v.Claimants(), "the other node's claim stays")
}

// TestNoClaimWinsAfterTheDrainThatRacedIt claims volumes from node a
// while another node drains it: every claim of a that won was written
// before the drain, and every one after it was refused.
func TestNoClaimWinsAfterTheDrainThatRacedIt(t *testing.T) {
	srv := etcdtest.Start(t)
	a, b := open(t, srv, "node-a"), open(t, srv, "node-b")
	healthyNode(t, a)
	ctx := testCtx(t)
	const volumes = 20
	for i := range volumes {
		registered(t, a, volume(fmt.Sprintf("v%d", i), model.AccessModeMultiNodeMultiWriter))
	}
	var wg sync.WaitGroup
	errs := make([]error, volumes)
	for i := range volumes {
		wg.Go(func() { _, errs[i] = a.Claim(ctx, "", fmt.Sprintf("v%d", i), writeClaim("web", "node-a")) })
	}
	_, err := b.Drain(ctx, "node-a")
	require.NoError(t, err)
	wg.Wait()

	raw, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: timeout})
	require.NoError(t, err)
	defer raw.Close()
	drain, err := raw.Get(ctx, "/plugvisor/drains/node-a")
	require.NoError(t, err)
	require.Len(t, drain.Kvs, 1)
	for i, err := range errs {
		key := fmt.Sprintf("/plugvisor/volumes/default/v%d", i)
		if err != nil {
			require.ErrorIs(t, err, csi.ErrClaimRefused, key)
			continue
		}
		rec, err := raw.Get(ctx, key)
		require.NoError(t, err)
		require.Less(t, rec.Kvs[0].ModRevision, drain.Kvs[0].CreateRevision, "%s was claimed after the drain", key)
	}
}

// nodesOf lists s's nodes.
func nodesOf(t *testing.T, s *fleet.Store) []*fleet.Node {
	t.Helper()
	nodes, err := s.Nodes(testCtx(t))
	require.NoError(t, err)
	return nodes
}
