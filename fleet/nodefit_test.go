package fleet_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/messages"
)

// limitedNode makes plugin "ebs" healthy on s's node, standing at zone
// and taking at most maxVolumes volumes, and the plugins of others healthy.
func limitedNode(t testing.TB, s *fleet.Store, zone string, maxVolumes int64, others ...string) {
	t.Helper()
	fp := nodePlugin("ebs", "plugin-"+s.NodeID(), true)
	fp.NodeInfo.MaxVolumes, fp.NodeInfo.AccessibleTopology = maxVolumes, map[string]string{"zone": zone}
	fps := []*messages.CSIFingerprint{fp}
	for _, p := range others {
		fps = append(fps, nodePlugin(p, "plugin-"+s.NodeID(), true))
	}
	require.NoError(t, s.PutFingerprints(testCtx(t), fps))
}

func TestAFleetClaimPastTheNodesVolumeLimitOrOutOfItsTopologyIsRefused(t *testing.T) {
	srv := etcdtest.Start(t)
	a, b := open(t, srv, "node-a"), open(t, srv, "node-b")
	limitedNode(t, a, "a", 2, "nfs")
	limitedNode(t, b, "b", 0)
	ctx := testCtx(t)
	for _, id := range []string{"v1", "v2", "v3"} {
		registered(t, a, volume(id, model.AccessModeMultiNodeMultiWriter))
	}
	far := volume("far", model.AccessModeMultiNodeMultiWriter)
	far.Topologies = []*model.Topology{{Segments: map[string]string{"zone": "b"}}}
	registered(t, a, far)
	other := volume("other", model.AccessModeMultiNodeMultiWriter)
	other.PluginID = "nfs"
	registered(t, a, other)

	for _, c := range []struct{ volume, alloc string }{{"other", "web-0"}, {"v1", "web-1"}, {"v2", "web-2"}, {"v1", "web-3"}} {
		_, err := b.Claim(ctx, "", c.volume, writeClaim(c.alloc, "node-a"))
		require.NoError(t, err, "%s by %s: another plugin's volume, and one on the node already, do not count", c.volume, c.alloc)
	}
	_, err := b.Claim(ctx, "", "far", writeClaim("web-0", "node-b"))
	require.NoError(t, err, "node-b stands in zone b")
	before, err := a.GetVolume(ctx, "", "far")
	require.NoError(t, err)
	_, err = b.Claim(ctx, "", "v3", writeClaim("web-4", "node-a"))
	require.ErrorIs(t, err, csi.ErrClaimRefused)
	require.ErrorIs(t, err, model.ErrNodeVolumeLimit)
	require.ErrorContains(t, err, "node node-a holds 2 volumes of plugin ebs (default/v1, default/v2), its limit (max_volumes_per_node from NodeGetInfo) is 2")
	_, err = b.Claim(ctx, "", "far", writeClaim("web-5", "node-a"))
	require.ErrorIs(t, err, model.ErrTopologyMismatch)
	require.ErrorContains(t, err, "volume default/far can be reached only from topology zone=b; node node-a (plugin node ID csi-plugin-node-a) stands at zone=a")
	after, err := a.GetVolume(ctx, "", "far")
	require.NoError(t, err)
	require.Equal(t, before, after, "the refused claim wrote nothing")
	v3, err := a.GetVolume(ctx, "", "v3")
	require.NoError(t, err)
	require.Empty(t, v3.WriteClaims, "nor did the one past the limit")

	_, err = a.Claim(ctx, "", "v3", writeClaim("web-4", "node-b"))
	require.NoError(t, err, "node-b's plugin sets no limit")
	_, err = a.Claim(ctx, "", "v3", writeClaim("web-7", "node-c"))
	require.NoError(t, err, "node-c has no fingerprint of the plugin: nothing is known to refuse")
	_, err = a.Release(ctx, "", "v2", free("web-2"))
	require.NoError(t, err)
	_, err = a.Claim(ctx, "", "v3", writeClaim("web-6", "node-a"))
	require.NoError(t, err, "a freed volume leaves room")
}

func TestTwoFleetClaimsRacingForTheLastRoomOnANodeLeaveOneWinner(t *testing.T) {
	srv := etcdtest.Start(t)
	a, b := open(t, srv, "node-a"), open(t, srv, "node-b")
	limitedNode(t, a, "a", 1)
	ctx := testCtx(t)
	for round := range 10 {
		ids := []string{"x" + string(rune('a'+round)), "y" + string(rune('a'+round))}
		for _, id := range ids {
			registered(t, a, volume(id, model.AccessModeMultiNodeMultiWriter))
		}
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i, s := range []*fleet.Store{a, b} {
			wg.Go(func() { _, errs[i] = s.Claim(ctx, "", ids[i], writeClaim("alloc-"+ids[i], "node-a")) })
		}
		wg.Wait()
		won := 0
		for i, err := range errs {
			if err == nil {
				won++
				_, err = a.Release(ctx, "", ids[i], free("alloc-"+ids[i]))
				require.NoError(t, err)
				continue
			}
			require.ErrorIs(t, err, model.ErrNodeVolumeLimit)
		}
		require.Equal(t, 1, won, "round %d: exactly one claim takes the node's last room", round)
	}
}

func TestAVolumeIsSchedulableOnlyWhereANodeCanReachIt(t *testing.T) {
	srv := etcdtest.Start(t)
	a, b := open(t, srv, "node-a"), open(t, srv, "node-b")
	limitedNode(t, a, "a", 0)
	ctx := testCtx(t)
	far := volume("far", model.AccessModeMultiNodeMultiWriter)
	far.Topologies = []*model.Topology{{Segments: map[string]string{"zone": "b"}}}
	registered(t, a, far)
	registered(t, a, volume("near", model.AccessModeMultiNodeMultiWriter))

	v, err := a.GetVolume(ctx, "", "far")
	require.NoError(t, err)
	require.False(t, v.Schedulable, "no healthy node stands in zone b")
	require.Zero(t, v.NodesHealthy)
	stubs, err := a.ListVolumes(ctx, "")
	require.NoError(t, err)
	require.Len(t, stubs, 2)
	require.False(t, stubs[0].Schedulable, "far, in the list too")
	require.True(t, stubs[1].Schedulable, "near has no topology")

	limitedNode(t, b, "b", 0)
	v, err = a.GetVolume(ctx, "", "far")
	require.NoError(t, err)
	require.True(t, v.Schedulable, "node-b stands in zone b")
	require.Equal(t, 1, v.NodesHealthy)
}
