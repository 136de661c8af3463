package catalog_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/messages"
)

// unreachableFingerprint is the first fingerprint of alloc's instance of
// plugin when the instance cannot be reached: unhealthy, having learned no
// capabilities (it never answered GetPluginCapabilities) nor node facts.
func unreachableFingerprint(plugin, alloc string) *messages.CSIFingerprint {
	return &messages.CSIFingerprint{
		Type: "csi-node", Name: plugin, AllocId: alloc,
		HealthDescription: "connect: connection refused", SocketPath: "/run/" + alloc + "/csi.sock",
	}
}

// atSocket is fp taken at socket.
func atSocket(fp *messages.CSIFingerprint, socket string) *messages.CSIFingerprint {
	fp.SocketPath = socket
	return fp
}

func TestAReplacingInstanceThatCannotBeReachedKeepsThePluginsTopologyRequirementUntilItSaysOtherwise(t *testing.T) {
	ctx := context.Background()
	unzoned := catVolume("db", "zoned", model.AccessModeSingleNodeWriter)

	catTwoRuns(t, []*messages.CSIFingerprint{
		zonedFingerprint("zoned", "a1"), replacedFingerprint("zoned", "a1", "a2"), unreachableFingerprint("zoned", "a2"),
	}, func(t *testing.T, f *catFixture) {
		_, err := f.cat.RegisterVolume(ctx, unzoned)
		require.ErrorIs(t, err, model.ErrTopologyRequired, "an instance that learned nothing does not lift the requirement its predecessor advertised")
		require.ErrorContains(t, err, "topolog")
		rec := f.plugin("zoned").Nodes[catNode]
		require.Equal(t, "a2", rec.AllocID, "the record is the new instance's")
		require.False(t, rec.Healthy)
		require.True(t, rec.CapabilitiesUnknown)
		require.Equal(t, "a1", rec.CapabilitiesFrom, "the record says whose capabilities it carries")
		require.Nil(t, rec.NodeInfo.AccessibleTopology, "the node's facts are the new instance's to learn, never carried")

		f.feed(unreachableFingerprint("zoned", "a2"), catNodeFingerprint("barrier", "b1", true))
		_, err = f.cat.RegisterVolume(ctx, unzoned)
		require.ErrorIs(t, err, model.ErrTopologyRequired, "a second word that learned nothing carries them on")
		require.Equal(t, "a1", f.plugin("zoned").Nodes[catNode].CapabilitiesFrom)
	}, "after a restart", func(t *testing.T, f *catFixture) {
		_, err := f.cat.RegisterVolume(ctx, unzoned)
		require.ErrorIs(t, err, model.ErrTopologyRequired, "the carried capabilities are kept on disk, marked")
		require.Equal(t, "a1", f.plugin("zoned").Nodes[catNode].CapabilitiesFrom)

		f.feed(unreachableFingerprint("zoned", "a2"))
		_, err = f.cat.RegisterVolume(ctx, unzoned)
		require.ErrorIs(t, err, model.ErrTopologyRequired)

		f.feed(catNodeFingerprint("zoned", "a2", true)) // healthy, without VOLUME_ACCESSIBILITY_CONSTRAINTS
		rec := f.plugin("zoned").Nodes[catNode]
		require.False(t, rec.CapabilitiesUnknown)
		require.Empty(t, rec.CapabilitiesFrom)
		require.False(t, rec.RequiresTopologies)
		f.register(unzoned) // the new instance's own word: no topology needed
	})
}

func TestAnInstanceWithNothingBeforeItLearnsNothingFromNowhere(t *testing.T) {
	f := startCatFixture(t, catMemoryBucket(t))
	f.feed(unreachableFingerprint("zoned", "a1"))
	rec := f.plugin("zoned").Nodes[catNode]
	require.True(t, rec.CapabilitiesUnknown)
	require.Empty(t, rec.CapabilitiesFrom, "nothing was carried")
	f.register(catVolume("db", "zoned", model.AccessModeSingleNodeWriter))
}

func TestTheOldInstancesFinalWordDoesNotHideTheSameAllocationAtANewSocket(t *testing.T) {
	old := atSocket(replacedFingerprint("zoned", "a1", "a1"), "/run/a1/old.sock")

	t.Run("the new instance spoke first", func(t *testing.T) {
		f := startCatFixture(t, catMemoryBucket(t))
		f.feed(atSocket(zonedFingerprint("zoned", "a1"), "/run/a1/old.sock"), atSocket(zonedFingerprint("zoned", "a1"), "/run/a1/new.sock"), old)
		rec := f.plugin("zoned").Nodes[catNode]
		require.Equal(t, "/run/a1/new.sock", rec.SocketPath, "the old instance's late final word is dropped")
		require.True(t, rec.Healthy)
		require.Empty(t, rec.ReplacedBy)
	})

	t.Run("the old instance's final word first", func(t *testing.T) {
		f := startCatFixture(t, catMemoryBucket(t))
		f.feed(atSocket(zonedFingerprint("zoned", "a1"), "/run/a1/old.sock"), old)
		rec := f.plugin("zoned").Nodes[catNode]
		require.False(t, rec.Healthy, "over the old instance's own record the final word is taken")
		require.Equal(t, "a1", rec.ReplacedBy)
		f.feed(atSocket(zonedFingerprint("zoned", "a1"), "/run/a1/new.sock"))
		require.True(t, f.plugin("zoned").Nodes[catNode].Healthy)
	})
}

func TestTheFleetKeepsTheTopologyRequirementAndTheNewSocketAsTheNodeDoes(t *testing.T) {
	srv := etcdtest.Start(t)
	a := startClusterNode(t, srv, "node-a")
	send := func(fps ...*messages.CSIFingerprint) {
		for _, fp := range fps {
			a.manager.Send(a.cat.PID(), &messages.CSIPluginFingerprinted{Fingerprint: fp})
		}
	}
	fleetRecord := func(barrier string) *model.CSIInfo {
		t.Helper()
		send(catNodeFingerprint(barrier, "b", true))
		var plugins []*model.CSIPlugin
		require.Eventually(t, func() bool {
			var err error
			plugins, err = a.cat.Plugins(context.Background())
			return err == nil && slices.ContainsFunc(plugins, func(p *model.CSIPlugin) bool { return p.ID == barrier })
		}, catWait, 20*time.Millisecond, "the last fingerprint reaches the fleet, with every one before it")
		i := slices.IndexFunc(plugins, func(p *model.CSIPlugin) bool { return p.ID == "zoned" })
		require.GreaterOrEqual(t, i, 0)
		return plugins[i].Nodes["node-a"]
	}

	send(zonedFingerprint("zoned", "a1"), replacedFingerprint("zoned", "a1", "a2"), unreachableFingerprint("zoned", "a2"))
	rec := fleetRecord("barrier1")
	require.Equal(t, "a2", rec.AllocID)
	require.Equal(t, "a1", rec.CapabilitiesFrom)
	_, err := a.cat.RegisterVolume(context.Background(), catVolume("db", "zoned", model.AccessModeSingleNodeWriter))
	require.ErrorIs(t, err, model.ErrTopologyRequired, "the fleet refuses it too")

	send(atSocket(zonedFingerprint("zoned", "a2"), "/run/a2/new.sock"), atSocket(replacedFingerprint("zoned", "a2", "a2"), "/run/a2/csi.sock"))
	rec = fleetRecord("barrier2")
	require.Equal(t, "/run/a2/new.sock", rec.SocketPath, "the old instance's late final word does not reach the fleet")
	require.True(t, rec.Healthy)
}
