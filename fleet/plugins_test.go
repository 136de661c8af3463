package fleet_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/messages"
)

// TestPluginCountsAcrossTheFleet: three nodes fingerprint plugin "ebs"
// (node services on all three, one unhealthy; a controller on one), and
// another plugin on one; Plugin counts ebs's instances over the fleet, its
// expected counts follow ExpectPlugin, and zero for both removes them.
func TestPluginCountsAcrossTheFleet(t *testing.T) {
	srv := etcdtest.Start(t)
	a, b, c := open(t, srv, "n1"), open(t, srv, "n2"), open(t, srv, "n3")
	ctx := testCtx(t)
	require.NoError(t, a.PutFingerprints(ctx, []*messages.CSIFingerprint{
		nodePlugin("ebs", "a1", true), controllerPlugin("ebs", "a2", true), nodePlugin("nfs", "a3", true)}))
	require.NoError(t, b.PutFingerprints(ctx, []*messages.CSIFingerprint{nodePlugin("ebs", "b1", true)}))
	require.NoError(t, c.PutFingerprints(ctx, []*messages.CSIFingerprint{nodePlugin("ebs", "c1", false)}))

	p, err := c.Plugin(ctx, "ebs")
	require.NoError(t, err)
	require.Equal(t, []int{2, 3, 1, 1, 0, 0}, []int{p.NodesHealthy, len(p.Nodes), p.ControllersHealthy, len(p.Controllers), p.NodesExpected, p.ControllersExpected})

	p, err = b.ExpectPlugin(ctx, "ebs", 3, 2)
	require.NoError(t, err)
	require.Equal(t, []int{3, 2}, []int{p.NodesExpected, p.ControllersExpected})
	p, err = a.Plugin(ctx, "ebs")
	require.NoError(t, err, "another node reads the expectation")
	require.Equal(t, []int{2, 3, 1, 2}, []int{p.NodesHealthy, p.NodesExpected, p.ControllersHealthy, p.ControllersExpected})

	nfs, err := a.Plugin(ctx, "nfs")
	require.NoError(t, err)
	require.Equal(t, []int{1, 0}, []int{nfs.NodesHealthy, nfs.NodesExpected}, "ebs's expectation is not nfs's")

	p, err = a.ExpectPlugin(ctx, "ebs", 0, 0)
	require.NoError(t, err)
	require.Equal(t, []int{0, 0, 2}, []int{p.NodesExpected, p.ControllersExpected, p.NodesHealthy})
}

// TestPluginWithoutInstancesOrExpectation: a plugin known by its
// expectation alone is there with zero healthy; once its expectation is
// removed it is gone (ErrPluginNotFound), nothing is left stored for it,
// and a node's fingerprints go with the node.
func TestPluginWithoutInstancesOrExpectation(t *testing.T) {
	srv := etcdtest.Start(t)
	a := open(t, srv, "n1")
	ctx := testCtx(t)
	_, err := a.Plugin(ctx, "ebs")
	require.ErrorIs(t, err, model.ErrPluginNotFound)

	p, err := a.ExpectPlugin(ctx, "ebs", 2, 0)
	require.NoError(t, err)
	require.Equal(t, []int{0, 2}, []int{p.NodesHealthy, p.NodesExpected})

	p, err = a.ExpectPlugin(ctx, "ebs", 0, 0)
	require.NoError(t, err)
	require.Nil(t, p, "an empty plugin is not kept")
	_, err = a.Plugin(ctx, "ebs")
	require.ErrorIs(t, err, model.ErrPluginNotFound)
	resp, err := rawClient(t, srv).Get(ctx, fleet.DefaultPrefix+"pluginexpect/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	require.Zero(t, resp.Count, "nothing empty stays in etcd")

	b := open(t, srv, "n2")
	require.NoError(t, b.PutFingerprints(ctx, []*messages.CSIFingerprint{nodePlugin("ebs", "b1", true)}))
	_, err = a.Plugin(ctx, "ebs")
	require.NoError(t, err)
	require.NoError(t, b.Close())
	_, err = a.Plugin(ctx, "ebs")
	require.ErrorIs(t, err, model.ErrPluginNotFound, "the fingerprints went with the node's lease")
}

// TestExpectPluginRefusesBadInput: a negative or absurd count, or a bad
// name, is ErrInvalid naming the field, and the stored expectation stays.
func TestExpectPluginRefusesBadInput(t *testing.T) {
	srv := etcdtest.Start(t)
	a := open(t, srv, "n1")
	ctx := testCtx(t)
	_, err := a.ExpectPlugin(ctx, "ebs", 1, 1)
	require.NoError(t, err)
	for _, tc := range []struct {
		name               string
		nodes, controllers int
		field              string
	}{
		{"ebs", -1, 0, "nodes"},
		{"ebs", 0, -2, "controllers"},
		{"ebs", model.MaxExpected + 1, 0, "nodes"},
		{"a/b", 1, 1, "plugin name"},
		{"", 1, 1, "plugin name"},
	} {
		_, err := a.ExpectPlugin(ctx, tc.name, tc.nodes, tc.controllers)
		require.ErrorIs(t, err, model.ErrInvalid, tc.field)
		require.ErrorContains(t, err, tc.field)
	}
	_, err = a.Plugin(ctx, "a/b")
	require.ErrorIs(t, err, model.ErrInvalid)
	p, err := a.Plugin(ctx, "ebs")
	require.NoError(t, err)
	require.Equal(t, []int{1, 1}, []int{p.NodesExpected, p.ControllersExpected})
}

// TestARegistrationThroughANodeWithoutThePluginNeedsTheTopologyItRequires:
// plugin "zonal" advertises VOLUME_ACCESSIBILITY_CONSTRAINTS on n1 only
// (its controller); a registration without topology through n2, which
// does not run it, is refused as through n1, alone or as a batch's item,
// and nothing is written. With a topology it is taken, and once n1's
// fingerprints go with its lease nothing requires one any more.
func TestARegistrationThroughANodeWithoutThePluginNeedsTheTopologyItRequires(t *testing.T) {
	srv := etcdtest.Start(t)
	a, b := open(t, srv, "n1"), open(t, srv, "n2")
	ctx := testCtx(t)
	zonal := controllerPlugin("zonal", "a1", true)
	zonal.Capabilities = &messages.CSICapabilities{Plugin: []string{"CONTROLLER_SERVICE", "VOLUME_ACCESSIBILITY_CONSTRAINTS"}}
	require.NoError(t, a.PutFingerprints(ctx, []*messages.CSIFingerprint{zonal}))
	require.NoError(t, b.PutFingerprints(ctx, []*messages.CSIFingerprint{nodePlugin("ebs", "b1", true)}))

	z := volume("z", model.AccessModeSingleNodeWriter)
	z.PluginID = "zonal"
	for _, s := range []*fleet.Store{a, b} {
		_, err := s.RegisterVolume(ctx, z)
		require.ErrorIs(t, err, model.ErrTopologyRequired, "through %s", s.NodeID())
		require.ErrorIs(t, err, model.ErrInvalid)
		require.ErrorContains(t, err, "topologies")
	}
	_, err := b.RegisterVolumes(ctx, []*model.CSIVolume{volume("e", model.AccessModeSingleNodeWriter), z})
	require.ErrorIs(t, err, model.ErrTopologyRequired)
	require.ErrorContains(t, err, `volumes[1] (volume "z")`)
	stubs, err := b.ListVolumes(ctx, "")
	require.NoError(t, err)
	require.Empty(t, stubs, "the refusals wrote nothing")

	created := z.Copy()
	created.ID, created.Created, created.ExternalID = "made", true, "made"
	_, err = b.RegisterVolume(ctx, created)
	require.NoError(t, err, "a volume the plugin created has the topology the plugin gave it")
	placed := z.Copy()
	placed.Topologies = []*model.Topology{{Segments: map[string]string{"zone": "a"}}}
	got, err := b.RegisterVolumes(ctx, []*model.CSIVolume{volume("e", model.AccessModeSingleNodeWriter), placed})
	require.NoError(t, err)
	require.True(t, got[0].Schedulable, "the answer's health follows each plugin's counts")

	require.NoError(t, a.Close())
	loose := z.Copy()
	loose.ID = "loose"
	_, err = b.RegisterVolume(ctx, loose)
	require.NoError(t, err, "no live node fingerprints zonal: nothing requires a topology")
}

// TestAPluginWhoseInstanceStoppedForAReplacementStillRequiresItsTopology:
// between the old instance's final fingerprint and the new one's first,
// the fleet keeps the stopped one (under the node's lease): the plugin is
// still there, and still requires a topology. (The fleet never had the
// one-agent catalog's gap; this keeps it so.)
func TestAPluginWhoseInstanceStoppedForAReplacementStillRequiresItsTopology(t *testing.T) {
	srv := etcdtest.Start(t)
	a, b := open(t, srv, "n1"), open(t, srv, "n2")
	ctx := testCtx(t)
	zonal := nodePlugin("zonal", "a1", true)
	zonal.Capabilities = &messages.CSICapabilities{Plugin: []string{"VOLUME_ACCESSIBILITY_CONSTRAINTS"}}
	require.NoError(t, a.PutFingerprints(ctx, []*messages.CSIFingerprint{zonal}))
	final := proto.CloneOf(zonal)
	final.Healthy, final.HealthDescription, final.ReplacedBy = false, model.StoppedDescription, "a2"
	require.NoError(t, a.PutFingerprints(ctx, []*messages.CSIFingerprint{final}))

	p, err := b.Plugin(ctx, "zonal")
	require.NoError(t, err)
	require.Equal(t, "a2", p.Nodes["n1"].ReplacedBy)
	z := volume("z", model.AccessModeSingleNodeWriter)
	z.PluginID = "zonal"
	_, err = b.RegisterVolume(ctx, z)
	require.ErrorIs(t, err, model.ErrTopologyRequired)
}
