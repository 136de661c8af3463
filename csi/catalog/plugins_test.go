package catalog_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/storage"
)

// pluginIDs lists the IDs of the plugins the catalog knows.
func (f *catFixture) pluginIDs() []string {
	f.t.Helper()
	plugins, err := f.cat.Plugins(context.Background())
	require.NoError(f.t, err)
	ids := []string{}
	for _, p := range plugins {
		ids = append(ids, p.ID)
	}
	return ids
}

func TestAnExpectationOnOneAgentIsKeptInThePluginsRecordAcrossARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	ctx := context.Background()

	t.Run("first run", func(t *testing.T) {
		f := startCatFixture(t, catBoltBucket(t, path))
		p, err := f.cat.ExpectPlugin(ctx, "hostpath", 3, 1)
		require.NoError(t, err)
		require.Equal(t, [4]int{0, 3, 0, 1}, [4]int{p.NodesHealthy, p.NodesExpected, p.ControllersHealthy, p.ControllersExpected},
			"a plugin never fingerprinted is known by its expectation")

		before := f.dump()
		for _, bad := range []struct {
			name               string
			nodes, controllers int
			field              string
		}{
			{"hostpath", -1, 0, "nodes"},
			{"hostpath", 0, model.MaxExpected + 1, "controllers"},
			{"host/path", 1, 1, "plugin name"},
		} {
			_, err := f.cat.ExpectPlugin(ctx, bad.name, bad.nodes, bad.controllers)
			require.ErrorIs(t, err, model.ErrInvalid)
			require.ErrorContains(t, err, bad.field)
		}
		require.Equal(t, before, f.dump(), "a refused expectation changes nothing")

		again, err := f.cat.ExpectPlugin(ctx, "hostpath", 3, 1)
		require.NoError(t, err)
		require.Equal(t, p.ModifyIndex, again.ModifyIndex, "the same expectation again writes nothing")
	})

	t.Run("second run", func(t *testing.T) {
		f := startCatFixture(t, catBoltBucket(t, path))
		p := f.plugin("hostpath")
		require.Equal(t, [2]int{3, 1}, [2]int{p.NodesExpected, p.ControllersExpected}, "the expectation is on disk")

		f.feed(catNodeFingerprint("hostpath", "a1", true))
		p = f.plugin("hostpath")
		require.Equal(t, [2]int{1, 3}, [2]int{p.NodesHealthy, p.NodesExpected})

		p, err := f.cat.ExpectPlugin(ctx, "hostpath", 0, 0)
		require.NoError(t, err)
		require.NotNil(t, p, "a plugin with an instance stays without its expectation")
		require.Equal(t, [3]int{1, 0, 0}, [3]int{p.NodesHealthy, p.NodesExpected, p.ControllersExpected})
		require.Empty(t, p.Jobs)

		none, err := f.cat.ExpectPlugin(ctx, "unknown", 0, 0)
		require.NoError(t, err)
		require.Nil(t, none)
		require.Equal(t, []string{"hostpath"}, f.pluginIDs(), "0/0 of an unknown plugin records nothing")
	})
}

func TestAnEmptyPluginIsForgottenByTheWriteThatEmptiesItAndOneWithAVolumeNever(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	ctx := context.Background()

	t.Run("first run", func(t *testing.T) {
		f := startCatFixture(t, catBoltBucket(t, path))
		f.feed(catNodeFingerprint("lone", "l1", true), catStoppedFingerprint("lone", "l1"))
		require.NotContains(t, f.pluginIDs(), "lone", "the deregistration of its only instance forgets a plugin without volumes")

		f.feed(catNodeFingerprint("hostpath", "a1", true))
		f.register(catVolume("db", "hostpath", model.AccessModeSingleNodeWriter))
		f.feed(catStoppedFingerprint("hostpath", "a1"))
		require.Equal(t, 0, f.plugin("hostpath").NodesHealthy, "a plugin with a volume is kept, its instance stopped")

		_, err := f.cat.ExpectPlugin(ctx, "expected", 1, 0)
		require.NoError(t, err)
		f.feed(catNodeFingerprint("expected", "e1", true), catStoppedFingerprint("expected", "e1"))
		require.Equal(t, []string{"expected", "hostpath"}, f.pluginIDs(), "an expectation keeps a plugin")
	})

	t.Run("second run", func(t *testing.T) {
		f := startCatFixture(t, catBoltBucket(t, path))
		require.Equal(t, []string{"expected", "hostpath"}, f.pluginIDs(), "start forgets neither")

		require.NoError(t, f.cat.DeregisterVolume(ctx, "", "db"))
		require.Equal(t, []string{"expected"}, f.pluginIDs(), "the deregistration of its last volume forgets a plugin without instances")

		p, err := f.cat.ExpectPlugin(ctx, "expected", 0, 0)
		require.NoError(t, err)
		require.Nil(t, p, "removing the expectation of a plugin without instances or volumes forgets it")
		require.Empty(t, f.pluginIDs())
	})

	t.Run("third run", func(t *testing.T) {
		f := startCatFixture(t, catBoltBucket(t, path))
		require.Empty(t, f.pluginIDs(), "what was forgotten stays forgotten")
		f.register(catVolume("db", "hostpath", model.AccessModeSingleNodeWriter))
		require.Empty(t, f.pluginIDs(), "a volume alone does not make a plugin")
	})
}

func TestStartForgetsAnEmptyPluginAnOlderCatalogLeft(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	p := model.NewCSIPlugin("old", 1)
	info, err := model.InstanceFromFingerprint(catStoppedFingerprint("old", "o1"))
	require.NoError(t, err)
	require.NoError(t, p.AddPlugin(catNode, info))
	record, err := proto.Marshal(p.Proto())
	require.NoError(t, err)

	t.Run("an older catalog's record", func(t *testing.T) {
		require.NoError(t, catBoltBucket(t, path).Apply([]storage.Op{storage.Put([]byte("plugin/old"), record)}))
	})
	t.Run("start", func(t *testing.T) {
		f := startCatFixture(t, catBoltBucket(t, path))
		require.Empty(t, f.pluginIDs())
	})
	t.Run("the record is gone", func(t *testing.T) {
		found := false
		require.NoError(t, catBoltBucket(t, path).Load(func(key, _ []byte) error {
			found = found || string(key) == "plugin/old"
			return nil
		}))
		require.False(t, found)
	})
}

// zonedFingerprint is a node fingerprint of a plugin that advertises
// VOLUME_ACCESSIBILITY_CONSTRAINTS.
func zonedFingerprint(plugin, alloc string) *messages.CSIFingerprint {
	fp := catNodeFingerprint(plugin, alloc, true)
	fp.Capabilities.Plugin = []string{"VOLUME_ACCESSIBILITY_CONSTRAINTS"}
	return fp
}

// replacedFingerprint is the final fingerprint of alloc's instance of a
// zoned plugin that the manager says alloc by took over.
func replacedFingerprint(plugin, alloc, by string) *messages.CSIFingerprint {
	fp := zonedFingerprint(plugin, alloc)
	fp.Healthy, fp.HealthDescription, fp.ReplacedBy = false, csi.StoppedDescription, by
	return fp
}

func TestAPluginWhoseAllocationIsBeingReplacedKeepsItsTopologyRequirementAndItsCreateIndex(t *testing.T) {
	ctx := context.Background()
	unzoned := catVolume("db", "zoned", model.AccessModeSingleNodeWriter)

	catTwoRuns(t, []*messages.CSIFingerprint{zonedFingerprint("zoned", "a1")}, func(t *testing.T, f *catFixture) {
		created := f.plugin("zoned").CreateIndex

		f.feed(replacedFingerprint("zoned", "a1", "a2"))
		_, err := f.cat.RegisterVolume(ctx, unzoned)
		require.ErrorIs(t, err, model.ErrTopologyRequired, "between the two instances the plugin still requires a topology")
		require.ErrorIs(t, err, model.ErrInvalid)
		require.Contains(t, f.pluginIDs(), "zoned", "the old instance's final word does not forget a plugin a newer alloc is taking over")

		f.feed(zonedFingerprint("zoned", "a2"))
		p := f.plugin("zoned")
		require.Equal(t, created, p.CreateIndex, "the plugin is the same one, not made again")
		require.Equal(t, "a2", p.Nodes[catNode].AllocID)
		require.Empty(t, p.Nodes[catNode].ReplacedBy)

		f.feed(replacedFingerprint("zoned", "a2", "a3"))
		_, err = f.cat.ExpectPlugin(ctx, "zoned", 0, 0)
		require.NoError(t, err)
		require.Contains(t, f.pluginIDs(), "zoned", "no other write forgets it while it is taken over either")
	}, "a restart before the newer alloc spoke", func(t *testing.T, f *catFixture) {
		require.Empty(t, f.pluginIDs(), "after a restart nothing is being taken over: every instance speaks afresh")
	})
}

func TestAPluginWhoseNewerAllocationIsDeregisteredBeforeItSpokeIsForgotten(t *testing.T) {
	f := startCatFixture(t, catMemoryBucket(t))
	f.feed(zonedFingerprint("zoned", "a1"), replacedFingerprint("zoned", "a1", "a2"))
	require.Contains(t, f.pluginIDs(), "zoned")

	f.feed(catStoppedFingerprint("zoned", "a2"))
	require.NotContains(t, f.pluginIDs(), "zoned", "the final word of the allocation the record names is no late word: the plugin is gone")
	f.register(catVolume("db", "zoned", model.AccessModeSingleNodeWriter))
}

func TestARestartEndsEveryTakeOverSoAPluginKeptByAVolumeIsForgottenWithIt(t *testing.T) {
	ctx := context.Background()
	catTwoRuns(t, []*messages.CSIFingerprint{zonedFingerprint("zoned", "a1")}, func(t *testing.T, f *catFixture) {
		v := catVolume("db", "zoned", model.AccessModeSingleNodeWriter)
		v.Topologies = []*model.Topology{{Segments: map[string]string{"zone": "a"}}}
		f.register(v)
		f.feed(replacedFingerprint("zoned", "a1", "a2"))
	}, "second run", func(t *testing.T, f *catFixture) {
		p := f.plugin("zoned")
		require.Empty(t, p.Nodes[catNode].ReplacedBy, "after a restart nothing is being taken over: every instance speaks afresh")
		require.NoError(t, f.cat.DeregisterVolume(ctx, "", "db"))
		require.Empty(t, f.pluginIDs(), "the deregistration of its last volume forgets a plugin without instances")
	})
}
