package catalog_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
)

func TestCatalogRefusesAClaimPastTheNodesVolumeLimitOrOutOfItsTopology(t *testing.T) {
	f := startCatFixture(t, catMemoryBucket(t))
	fp := catNodeFingerprint("hostpath", "p1", true)
	fp.NodeInfo.MaxVolumes = 2 // and the node stands at zone=a
	f.feed(fp)
	for _, id := range []string{"a", "b", "c"} {
		f.register(catVolume(id, "hostpath", model.AccessModeMultiNodeMultiWriter))
	}
	far := catVolume("far", "hostpath", model.AccessModeMultiNodeMultiWriter)
	far.Topologies = []*model.Topology{{Segments: map[string]string{"zone": "b"}}}
	f.register(far)
	claim := func(volume, alloc, node string) error {
		_, err := catAsk[*messages.ClaimVolumeResponse](f, &messages.ClaimVolume{VolumeId: volume, AllocId: alloc,
			Mode: string(model.ClaimModeWrite), NodeId: node})
		return err
	}
	require.NoError(t, claim("a", "web-1", catNode))
	require.NoError(t, claim("b", "web-2", catNode))
	require.NoError(t, claim("a", "web-3", catNode), "a volume already on the node does not count again")

	before := f.dump()
	err := claim("c", "web-4", catNode)
	require.ErrorIs(t, err, model.ErrClaimRefused)
	require.ErrorIs(t, err, model.ErrNodeVolumeLimit)
	require.ErrorContains(t, err, "node node-1 holds 2 volumes of plugin hostpath (default/a, default/b), its limit (max_volumes_per_node from NodeGetInfo) is 2")
	err = claim("far", "web-5", catNode)
	require.ErrorIs(t, err, model.ErrTopologyMismatch)
	require.ErrorContains(t, err, "volume default/far can be reached only from topology zone=b; node node-1 (plugin node ID csi-node-1) stands at zone=a")
	require.Equal(t, before, f.dump(), "a refused claim changes nothing")

	require.NoError(t, claim("c", "web-4", "node-2"), "another node, where the plugin said nothing, has room")
	_, err = catAsk[*messages.ReleaseVolumeResponse](f, &messages.ReleaseVolume{VolumeId: "b", AllocId: "web-2"})
	require.NoError(t, err)
	require.NoError(t, claim("c", "web-6", catNode), "a released volume leaves room")
}

func TestCatalogRefusesATopologySegmentWithABadKeyNamingTheField(t *testing.T) {
	f := startCatFixture(t, catMemoryBucket(t))
	tests := []struct {
		name    string
		segment string
		want    string
	}{
		{name: "an empty key", segment: "", want: `topologies[0] segment key must not be empty`},
		{name: "a control character", segment: "zone\x01", want: `topologies[0] segment key "zone\x01" must not contain`},
		{name: "a bidirectional character", segment: "zone\u202e", want: `topologies[0] segment key "zone\u202e" must not contain`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := catVolume("db", "hostpath", model.AccessModeSingleNodeWriter)
			v.Topologies = []*model.Topology{{Segments: map[string]string{tt.segment: "a"}}}
			before := f.dump()
			_, err := f.cat.RegisterVolume(context.Background(), v)
			require.ErrorIs(t, err, model.ErrInvalid)
			require.ErrorContains(t, err, tt.want)
			require.Equal(t, before, f.dump(), "the refused registration changed nothing")
		})
	}
}
