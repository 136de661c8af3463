package fleet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
)

func TestReindexNamesThePluginInClaimKeysWrittenBeforeTheirValuesDid(t *testing.T) {
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
	require.Equal(t, "ebs", value(), "a claim key names its volume's plugin")

	_, err = s.client.Put(ctx, key, "") // as written before the values
	require.NoError(t, err)
	fixed, err := s.reindex(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, fixed)
	require.Equal(t, "ebs", value(), "reindex named the plugin")
	fixed, err = s.reindex(ctx)
	require.NoError(t, err)
	require.Zero(t, fixed, "a right index is left alone")
}
