package catalog_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi/catalog"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/storage"
)

// catBatch is n volumes of plugin hostpath named prefix-0 … prefix-(n-1).
func catBatch(prefix string, n int) []*model.CSIVolume {
	vs := make([]*model.CSIVolume, n)
	for i := range vs {
		vs[i] = catVolume(fmt.Sprintf("%s-%d", prefix, i), "hostpath", model.AccessModeSingleNodeWriter)
	}
	return vs
}

// catBoltBucket opens the catalog's bucket in the bolt file at path, until
// the (sub)test ends.
func catBoltBucket(t *testing.T, path string) storage.Bucket {
	t.Helper()
	store, err := storage.OpenBolt(path, storage.BoltOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	bucket, err := store.Bucket(catalog.Bucket)
	require.NoError(t, err)
	return bucket
}

func TestABatchIsRegisteredAllOrNothingAndStaysSoAcrossARestart(t *testing.T) {
	ctx := context.Background()

	var before catDump
	catTwoRuns(t, []*messages.CSIFingerprint{catNodeFingerprint("hostpath", "p1", true)}, func(t *testing.T, f *catFixture) {
		f.register(catVolume("held", "hostpath", model.AccessModeSingleNodeWriter))
		require.NoError(t, f.cat.Claim(ctx, catClaim("held", "a1", false)))

		good, err := f.cat.RegisterVolumes(ctx, catBatch("ok", 3))
		require.NoError(t, err)
		require.Len(t, good, 3)
		for i, v := range good {
			require.Equal(t, fmt.Sprintf("ok-%d", i), v.ID, "the answer keeps the batch's order")
			require.Equal(t, good[0].ModifyIndex, v.ModifyIndex, "one write, one index")
		}
		before = f.dump()

		bad := catBatch("new", 3)
		bad[2] = catVolume("held", "hostpath", model.AccessModeMultiNodeReader) // held by a1: its description cannot change
		_, err = f.cat.RegisterVolumes(ctx, bad)
		require.ErrorIs(t, err, model.ErrVolumeInUse)
		require.ErrorContains(t, err, `volumes[2] (volume "held")`, "the refusal names the item")
		require.Equal(t, before, f.dump(), "no volume of the batch was registered")

		taken := catBatch("dup", 2)
		taken[1].ExternalID = "dup-0" // the plugin volume of the item before it
		_, err = f.cat.RegisterVolumes(ctx, taken)
		require.ErrorIs(t, err, model.ErrVolumeConflict)
		require.ErrorContains(t, err, `volumes[1] (volume "dup-1")`)
		require.Equal(t, before, f.dump())

		err = f.cat.DeregisterVolumes(ctx, "", []string{"ok-0", "held", "ok-1"})
		require.ErrorIs(t, err, model.ErrVolumeInUse)
		require.ErrorContains(t, err, `volumes[1] (volume "held")`)
		err = f.cat.DeregisterVolumes(ctx, "", []string{"ok-0", "gone"})
		require.ErrorIs(t, err, model.ErrVolumeNotFound)
		require.ErrorContains(t, err, `volumes[1] (volume "gone")`)
		require.Equal(t, before, f.dump(), "no volume of the batch was deregistered")
	}, "second run", func(t *testing.T, f *catFixture) {
		stubs, err := f.cat.ListVolumes(ctx, "")
		require.NoError(t, err)
		require.Equal(t, []string{"default/held", "default/ok-0", "default/ok-1", "default/ok-2"}, catStubNames(stubs),
			"the good batch is on disk and nothing of the refused ones is")
		require.NoError(t, f.cat.DeregisterVolumes(ctx, "", []string{"ok-2", "ok-0"}))
		stubs, err = f.cat.ListVolumes(ctx, "")
		require.NoError(t, err)
		require.Equal(t, []string{"default/held", "default/ok-1"}, catStubNames(stubs))
	})
}

func TestABadBatchIsRefusedNamingTheFieldAndChangesNothing(t *testing.T) {
	ctx := context.Background()
	f := startCatFixture(t, catMemoryBucket(t))
	f.register(catVolume("a", "hostpath", model.AccessModeSingleNodeWriter))
	before := f.dump()

	twice := catBatch("v", 3)
	twice[2] = catVolume("v-0", "hostpath", model.AccessModeMultiNodeReader)
	bad := catVolume("ok", "hostpath", model.AccessModeSingleNodeWriter)
	bad.AccessMode = "sometimes"
	for name, tc := range map[string]struct {
		vs   []*model.CSIVolume
		want string
	}{
		"empty":         {nil, "volumes: a batch needs at least one volume"},
		"over limit":    {catBatch("v", model.MaxBatch+1), fmt.Sprintf("volumes: %d volumes in one batch, over the limit of %d", model.MaxBatch+1, model.MaxBatch)},
		"duplicate":     {twice, `volumes[2]: volume "v-0" in namespace "default" is volumes[0] too`},
		"null":          {[]*model.CSIVolume{nil}, "volumes[0]: must not be null"},
		"bad mode":      {append(catBatch("v", 1), bad), `volumes[1] (volume "ok")`},
		"bad volume ID": {[]*model.CSIVolume{catVolume("a/b", "hostpath", model.AccessModeSingleNodeWriter)}, `volumes[0] (volume "a/b")`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := f.cat.RegisterVolumes(ctx, tc.vs)
			require.ErrorIs(t, err, model.ErrInvalid)
			require.ErrorContains(t, err, tc.want)
			require.Equal(t, before, f.dump())
		})
	}
	err := f.cat.DeregisterVolumes(ctx, "", []string{"a", "a"})
	require.ErrorIs(t, err, model.ErrInvalid)
	require.ErrorContains(t, err, `volumes[1]: volume "a" in namespace "default" is volumes[0] too`)
	require.Equal(t, before, f.dump())
}

func TestABatchPastTheVolumeLimitRegistersNoneOfIt(t *testing.T) {
	ctx := context.Background()
	system := probe.NewSystem(t)
	cat, err := catalog.Start(system, catalog.Config{Bucket: catMemoryBucket(t), NodeID: catNode, Logger: probe.Logger(t), MaxVolumes: 3})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cat.Shutdown(ctx)) })
	f := &catFixture{t: t, system: system, cat: cat}
	f.register(catVolume("a", "hostpath", model.AccessModeSingleNodeWriter))

	_, err = cat.RegisterVolumes(ctx, catBatch("v", 3))
	require.ErrorIs(t, err, model.ErrVolumeLimit)
	require.ErrorContains(t, err, `volumes[2] (volume "v-2")`, "the third is the one past the limit of 3")
	stubs, err := cat.ListVolumes(ctx, "")
	require.NoError(t, err)
	require.Equal(t, []string{"default/a"}, catStubNames(stubs))

	_, err = cat.RegisterVolumes(ctx, catBatch("v", 2))
	require.NoError(t, err, "a batch that fits is taken")
}

func TestCatalogRefusesAVolumeWithoutTopologyOfAPluginThatRequiresOne(t *testing.T) {
	ctx := context.Background()
	f := startCatFixture(t, catMemoryBucket(t))
	fp := catNodeFingerprint("zonal", "p1", true)
	fp.Capabilities.Plugin = []string{"VOLUME_ACCESSIBILITY_CONSTRAINTS"}
	f.feed(fp, catNodeFingerprint("hostpath", "p2", true))
	require.True(t, f.plugin("zonal").TopologyRequired(), "recorded from the fingerprint")
	require.False(t, f.plugin("hostpath").TopologyRequired())
	before := f.dump()

	_, err := f.cat.RegisterVolume(ctx, catVolume("db", "zonal", model.AccessModeSingleNodeWriter))
	require.ErrorIs(t, err, model.ErrTopologyRequired)
	require.ErrorIs(t, err, model.ErrInvalid)
	require.ErrorContains(t, err, `volume default/db: topologies: plugin "zonal" advertises VOLUME_ACCESSIBILITY_CONSTRAINTS`)
	require.ErrorContains(t, err, "volume register -topology KEY=VALUE", "the remedy")
	_, err = f.cat.RegisterVolumes(ctx, []*model.CSIVolume{catVolume("a", "hostpath", model.AccessModeSingleNodeWriter), catVolume("b", "zonal", model.AccessModeSingleNodeWriter)})
	require.ErrorIs(t, err, model.ErrTopologyRequired)
	require.ErrorContains(t, err, `volumes[1] (volume "b")`)
	require.Equal(t, before, f.dump(), "nothing changed")

	placed := catVolume("db", "zonal", model.AccessModeSingleNodeWriter)
	placed.Topologies = []*model.Topology{{Segments: map[string]string{"zone": "a"}}}
	f.register(placed)
	f.register(catVolume("free", "hostpath", model.AccessModeSingleNodeWriter)) // a plugin without the capability needs none
}
