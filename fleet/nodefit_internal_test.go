package fleet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
)

func TestReindexNamesThePluginAndTheAllocsInClaimKeysWrittenBeforeTheirValuesDid(t *testing.T) {
	s, ctx := withVolume(t, 5*time.Second, model.AccessModeMultiNodeMultiWriter)
	require.NoError(t, s.PutFingerprints(ctx, []*messages.CSIFingerprint{{Type: "csi-node", Name: "ebs", AllocId: "p1", Healthy: true,
		NodeInfo: &messages.CSINodeInfo{NodeId: "csi-node-a"}}}))
	key := s.keys.indexed(s.keys.claimsOf, "node-a", model.DefaultNamespace, "db")
	value := func() string {
		resp, err := s.client.Get(ctx, key)
		require.NoError(t, err)
		require.Len(t, resp.Kvs, 1)
		return string(resp.Kvs[0].Value)
	}
	_, err := s.Claim(ctx, "", "db", &model.Claim{AllocID: "web", NodeID: "node-a", Mode: model.ClaimModeRead, State: model.ClaimStateTaken})
	require.NoError(t, err)
	require.Equal(t, "ebs\nweb", value(), "a claim key names its volume's plugin, then the node's allocs that claim it")

	_, err = s.client.Put(ctx, key, "") // as written before the values
	require.NoError(t, err)
	fixed, err := s.reindex(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, fixed)
	require.Equal(t, "ebs\nweb", value(), "reindex named the plugin and the allocs")
	fixed, err = s.reindex(ctx)
	require.NoError(t, err)
	require.Zero(t, fixed, "a right index is left alone")
}

// TestAVolumeReadAtACompactedRevisionSaysSo reads a volume at a revision
// that a compaction has discarded since: rpctypes.ErrCompacted, as it is,
// which readNodes takes as its cue to read again at a newer revision.
func TestAVolumeReadAtACompactedRevisionSaysSo(t *testing.T) {
	s, ctx := withVolume(t, 5*time.Second, model.AccessModeMultiNodeMultiWriter)
	key := s.keys.volume(model.DefaultNamespace, "db")
	resp, err := s.client.Get(ctx, key)
	require.NoError(t, err)
	vols, err := s.volumesAt(ctx, []string{key, key}, resp.Header.Revision)
	require.NoError(t, err)
	require.Len(t, vols, 1, "a key named twice is read once")
	_, err = s.RecordVolumeCapacity(ctx, "", "db", 1<<20)
	require.NoError(t, err)
	now, err := s.client.Get(ctx, key)
	require.NoError(t, err)
	_, err = s.client.Compact(ctx, now.Header.Revision)
	require.NoError(t, err)
	_, err = s.volumesAt(ctx, []string{key}, resp.Header.Revision)
	require.ErrorIs(t, err, rpctypes.ErrCompacted)
	nodes, err := s.readNodes(ctx)
	require.NoError(t, err, "the node list reads at the revision it is at")
	require.Contains(t, nodes, "node-a")
}
