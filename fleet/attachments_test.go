package fleet_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

func attached(node string) *model.Attachment {
	return &model.Attachment{NodeID: node, ExternalNodeID: "csi-" + node, State: model.AttachmentStateAttached}
}

// TestAnAttachmentHoldsASingleNodeVolumeUntilItIsDetached follows the
// attachment of a single-node volume through etcd: recorded for the node
// with the claim, kept when that claim is freed (the controller has not
// detached it yet), refused to another node while it lasts, and in the
// way of a deregistration, a delete and a new description, until the
// detach removes it.
func TestAnAttachmentHoldsASingleNodeVolumeUntilItIsDetached(t *testing.T) {
	a, b := twoWithDB(t, model.AccessModeSingleNodeWriter)
	ctx := testCtx(t)

	_, err := a.Attach(ctx, "", "db", attached("node-a"))
	require.ErrorIs(t, err, csi.ErrClaimRefused)
	require.ErrorIs(t, err, model.ErrAttachRefused, "a node attaches only what it claims")

	_, err = a.Claim(ctx, "", "db", writeClaim("alloc-1", "node-a"))
	require.NoError(t, err)
	v, err := a.Attach(ctx, "", "db", attached("node-a"))
	require.NoError(t, err)
	again, err := a.Attach(ctx, "", "db", attached("node-a"))
	require.NoError(t, err)
	require.Equal(t, v.ModifyIndex, again.ModifyIndex, "recording the same attachment again writes nothing")

	_, err = a.Release(ctx, "", "db", free("alloc-1"))
	require.NoError(t, err)
	_, err = b.Claim(ctx, "", "db", writeClaim("alloc-2", "node-b"))
	require.NoError(t, err, "the claim is free")
	_, err = b.Attach(ctx, "", "db", attached("node-b"))
	require.ErrorIs(t, err, csi.ErrClaimRefused)
	require.ErrorIs(t, err, model.ErrAttachConflict, "but node-a still holds the attachment")
	_, err = b.Release(ctx, "", "db", free("alloc-2"))
	require.NoError(t, err)

	for name, refused := range map[string]error{
		"deregister":   b.DeregisterVolume(ctx, "", "db"),
		"mark deleted": second(b.MarkVolumeDeleting(ctx, "", "db")),
		"describe anew": second(b.RegisterVolume(ctx, func() *model.CSIVolume {
			v := volume("db", model.AccessModeSingleNodeWriter)
			v.Parameters = map[string]string{"size": "big"}
			return v
		}())),
	} {
		require.ErrorIs(t, refused, model.ErrVolumeInUse, name)
		require.ErrorContains(t, refused, "is attached to nodes node-a", name)
	}
	same, err := b.RegisterVolume(ctx, volume("db", model.AccessModeSingleNodeWriter))
	require.NoError(t, err, "the same description again is not a change")
	require.Contains(t, same.Attachments, "node-a", "and keeps the attachment")

	_, err = b.Detach(ctx, "", "db", "node-a")
	require.NoError(t, err)
	_, err = b.Detach(ctx, "", "db", "node-a")
	require.NoError(t, err, "detaching what is detached changes nothing")
	_, err = b.Detach(ctx, "", "db", "../a")
	require.ErrorIs(t, err, model.ErrInvalid)
	require.NoError(t, b.DeregisterVolume(ctx, "", "db"))
}

// TestNodesRacingToAttachAMultiNodeVolumeAreAllRecorded checks that the
// transactions keep every attachment when the nodes of a multi-node
// volume record theirs at the same time: none is lost to another's write.
func TestNodesRacingToAttachAMultiNodeVolumeAreAllRecorded(t *testing.T) {
	srv := etcdtest.Start(t)
	nodes := []string{"node-a", "node-b", "node-c"}
	stores := map[string]*fleet.Store{}
	for _, n := range nodes {
		stores[n] = open(t, srv, n)
		healthyNode(t, stores[n])
	}
	ctx := testCtx(t)
	registered(t, stores["node-a"], volume("shared", model.AccessModeMultiNodeMultiWriter))
	for _, n := range nodes {
		_, err := stores[n].Claim(ctx, "", "shared", writeClaim("alloc-"+n, n))
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(nodes))
	for _, n := range nodes {
		wg.Go(func() {
			_, err := stores[n].Attach(ctx, "", "shared", attached(n))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	v, err := stores["node-a"].GetVolume(ctx, "", "shared")
	require.NoError(t, err)
	require.Len(t, v.Attachments, 3)
	up, err := stores["node-a"].NodeUp(ctx, "node-c")
	require.NoError(t, err)
	require.True(t, up)
	require.NoError(t, stores["node-c"].Close())
	up, err = stores["node-a"].NodeUp(ctx, "node-c")
	require.NoError(t, err)
	require.False(t, up, "a node whose lease is revoked is down")
}

// TestStrandedAttachmentsAreThoseOfDownNodesWithoutClaims lists the
// attachments that only another node can undo: a down node's, once its
// claims are gone, and not a live node's nor one whose claims remain.
func TestStrandedAttachmentsAreThoseOfDownNodesWithoutClaims(t *testing.T) {
	srv := etcdtest.Start(t)
	a, b, c := open(t, srv, "node-a"), open(t, srv, "node-b"), open(t, srv, "node-c")
	for _, s := range []*fleet.Store{a, b, c} {
		healthyNode(t, s)
	}
	ctx := testCtx(t)
	registered(t, a, volume("shared", model.AccessModeMultiNodeMultiWriter))
	for _, s := range []*fleet.Store{a, b, c} {
		node := s.NodeID()
		_, err := s.Claim(ctx, "", "shared", writeClaim("alloc-"+node, node))
		require.NoError(t, err)
		_, err = s.Attach(ctx, "", "shared", attached(node))
		require.NoError(t, err)
	}
	stranded, err := a.Stranded(ctx)
	require.NoError(t, err)
	require.Empty(t, stranded, "every node is up")

	_, err = c.Release(ctx, "", "shared", free("alloc-node-c"))
	require.NoError(t, err)
	require.NoError(t, b.Close())
	require.NoError(t, c.Close())
	stranded, err = a.Stranded(ctx)
	require.NoError(t, err)
	require.Equal(t, []fleet.Stranded{{Namespace: "default", VolumeID: "shared", PluginID: "ebs", Attachment: attached("node-c")}}, stranded,
		"node-b is down but its alloc still claims the volume; node-c is down with no claim")
}

// TestADetachFromAnotherNodeHoldsOnlyWhileThatNodeIsDownAndClaimsNothing
// is a node that comes back while another node detaches its stranded
// attachment: marking the attachment detaching is refused in the
// transaction while the node is up or claims the volume, and once it is
// marked, the node's own attachment is refused until the detach is done,
// so no ControllerUnpublishVolume runs under a node that uses the volume.
func TestADetachFromAnotherNodeHoldsOnlyWhileThatNodeIsDownAndClaimsNothing(t *testing.T) {
	srv, s := fleetWithDB(t, model.AccessModeSingleNodeWriter, "node-a", "node-c")
	a, c := s[0], s[1]
	ctx := testCtx(t)
	_, err := c.Claim(ctx, "", "db", writeClaim("alloc-1", "node-c"))
	require.NoError(t, err)
	_, err = c.Attach(ctx, "", "db", attached("node-c"))
	require.NoError(t, err)

	_, err = a.MarkDetaching(ctx, "", "db", "node-c")
	require.ErrorIs(t, err, model.ErrVolumeInUse)
	require.ErrorContains(t, err, "attached to node node-c, which is up")
	require.NoError(t, c.Close())
	_, err = a.MarkDetaching(ctx, "", "db", "node-c")
	require.ErrorIs(t, err, model.ErrVolumeInUse)
	require.ErrorContains(t, err, "allocs alloc-1 still hold claims")

	// The claim is freed; node-c comes back and claims again before the
	// detach: the mark is refused.
	_, err = a.Release(ctx, "", "db", free("alloc-1"))
	require.NoError(t, err)
	back := open(t, srv, "node-c")
	healthyNode(t, back)
	_, err = back.Claim(ctx, "", "db", writeClaim("alloc-2", "node-c"))
	require.NoError(t, err)
	_, err = a.MarkDetaching(ctx, "", "db", "node-c")
	require.ErrorIs(t, err, model.ErrVolumeInUse, "a node that is up again keeps its attachment")

	// Down again, claim freed: the mark holds, and node-c's attachment is
	// refused until the detach is done.
	_, err = a.Release(ctx, "", "db", free("alloc-2"))
	require.NoError(t, err)
	require.NoError(t, back.Close())
	v, err := a.MarkDetaching(ctx, "", "db", "node-c")
	require.NoError(t, err)
	require.Equal(t, model.AttachmentStateDetaching, v.Attachments["node-c"].State)
	again := open(t, srv, "node-c")
	healthyNode(t, again)
	_, err = again.Claim(ctx, "", "db", writeClaim("alloc-3", "node-c"))
	require.NoError(t, err)
	_, err = again.Attach(ctx, "", "db", attached("node-c"))
	require.ErrorIs(t, err, model.ErrAttachConflict)
	require.ErrorContains(t, err, "is being detached")
	_, err = a.Detach(ctx, "", "db", "node-c")
	require.NoError(t, err)
	_, err = again.Attach(ctx, "", "db", attached("node-c"))
	require.NoError(t, err, "once detached, the node attaches again")
}
