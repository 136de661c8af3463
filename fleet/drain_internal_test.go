package fleet

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/messages"
)

// hookedWrites is a KV that calls before as each write through it is
// about to be sent; a write that before fails is not sent, and fails so.
type hookedWrites struct {
	clientv3.KV
	before func() error
}

func (k hookedWrites) Txn(ctx context.Context) clientv3.Txn {
	return hookedTxn{Txn: k.KV.Txn(ctx), before: k.before}
}

func (k hookedWrites) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	if err := k.before(); err != nil {
		return nil, err
	}
	return k.KV.Delete(ctx, key, opts...)
}

// hookedTxn is a Txn of hookedWrites: one with a write in it calls before.
type hookedTxn struct {
	clientv3.Txn
	before func() error
	writes bool
}

func (t hookedTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.Txn = t.Txn.If(cs...)
	return t
}

func (t hookedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Then(ops...)
	for _, op := range ops {
		t.writes = t.writes || op.IsPut() || op.IsDelete()
	}
	return t
}

func (t hookedTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t hookedTxn) Commit() (*clientv3.TxnResponse, error) {
	if t.writes {
		if err := t.before(); err != nil {
			return nil, err
		}
	}
	return t.Txn.Commit()
}

// TestADrainWhoseAnswerIsLostIsOutcomeUnknownNeverUnavailable drains a
// node and ends its drain through a store whose etcd answers are dropped
// from the moment the write is sent: each write is applied, and each is
// answered "outcome unknown", which says it may have been applied, never
// "unavailable", which says it was not (an operator who trusted that
// would think the node still took claims, or still refused them).
func TestADrainWhoseAnswerIsLostIsOutcomeUnknownNeverUnavailable(t *testing.T) {
	srv := etcdtest.Start(t)
	proxy := srv.Proxy(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	open := func(node string, endpoints []string) *Store {
		s, err := Open(ctx, Config{Endpoints: endpoints, NodeID: node, LeaseTTL: MinLeaseTTL, RequestTimeout: time.Second})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		return s
	}
	a := open("node-a", srv.Endpoints())
	operator := open("node-op", proxy.Endpoints())
	// Armed, the next write mutes the proxy as it is sent: it reaches
	// etcd and is applied, but its answer never comes.
	armed := &atomic.Bool{}
	operator.client.KV = hookedWrites{KV: operator.client.KV, before: func() error {
		if armed.CompareAndSwap(true, false) {
			proxy.Mute()
		}
		return nil
	}}
	draining := func() bool {
		nodes, err := a.Nodes(ctx)
		require.NoError(t, err)
		for _, n := range nodes {
			if n.ID == "node-a" {
				return !n.DrainingSince.IsZero()
			}
		}
		t.Fatal("node-a is not listed")
		return false
	}

	armed.Store(true)
	_, err := operator.Drain(ctx, "node-a")
	proxy.Heal()
	require.ErrorIs(t, err, model.ErrOutcomeUnknown)
	require.ErrorContains(t, err, "may or may not have been applied")
	require.True(t, draining(), "the drain was applied")

	// Heal closed the muted connection: the end of the drain must go out
	// on a connection that etcd answers first, or it is never sent (and
	// is rightly "unavailable").
	require.Eventually(t, func() bool { _, err := operator.Nodes(ctx); return err == nil }, 30*time.Second, 100*time.Millisecond)
	armed.Store(true)
	_, err = operator.Undrain(ctx, "node-a")
	proxy.Heal()
	require.ErrorIs(t, err, model.ErrOutcomeUnknown)
	require.False(t, draining(), "the end of the drain was applied")
}

// TestAForcedFreeThatFailsPartWayNamesTheClaimsItFreed frees the claims
// of a draining node on two volumes, and etcd does not take the second
// volume's write: the first claim is freed, and the error says so, naming
// it, besides the failure, so that an operator is not told only that the
// free failed (503, "unavailable") when it freed claims.
func TestAForcedFreeThatFailsPartWayNamesTheClaimsItFreed(t *testing.T) {
	s, ctx := withVolume(t, 5*time.Second, model.AccessModeMultiNodeMultiWriter)
	require.NoError(t, s.PutFingerprints(ctx, []*messages.CSIFingerprint{{Type: "csi-node", Name: "ebs", AllocId: "p1", Healthy: true,
		NodeInfo: &messages.CSINodeInfo{NodeId: "csi-node-a"}}}))
	for _, id := range []string{"a-vol", "b-vol"} {
		v := model.NewCSIVolume(id, 0)
		v.Namespace, v.PluginID, v.AccessMode, v.AttachmentMode = model.DefaultNamespace, "ebs", model.AccessModeMultiNodeMultiWriter, model.AttachmentModeFileSystem
		_, err := s.RegisterVolume(ctx, v)
		require.NoError(t, err)
		_, err = s.Claim(ctx, "", id, &model.Claim{AllocID: "web-" + id, NodeID: "node-a", Mode: model.ClaimModeWrite, State: model.ClaimStateTaken})
		require.NoError(t, err)
	}
	_, err := s.Drain(ctx, "node-a")
	require.NoError(t, err)
	writes := 0
	s.client.KV = hookedWrites{KV: s.client.KV, before: func() error {
		if writes++; writes == 2 {
			return context.DeadlineExceeded // not sent: etcd never saw it
		}
		return nil
	}}

	freed, err := s.FreeNodeClaims(ctx, "node-a")
	require.ErrorIs(t, err, model.ErrFleetUnavailable, "the failure")
	require.NotErrorIs(t, err, model.ErrOutcomeUnknown, "the failed write was not sent")
	require.ErrorContains(t, err, "freed 1 claim of node node-a's allocs before it failed: web-a-vol on default/a-vol")
	require.ErrorContains(t, err, "the others stay held")
	require.Equal(t, []Freed{{Namespace: model.DefaultNamespace, VolumeID: "a-vol", AllocID: "web-a-vol", NodeID: "node-a"}}, freed)
	v, err := s.GetVolume(ctx, "", "a-vol")
	require.NoError(t, err)
	require.Empty(t, v.Claimants(), "freed, as the error says")
}
