package catalog_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
)

func TestCatalogFingerprintsKeepPluginCountsAndVolumeHealth(t *testing.T) {
	f := startCatFixture(t, catMemoryBucket(t))
	f.register(catVolume("db", "hostpath", model.AccessModeSingleNodeWriter))
	f.register(catVolume("other", "nfs", model.AccessModeSingleNodeWriter))

	steps := []struct {
		name               string
		send               []*messages.CSIFingerprint
		nodes, controllers int    // healthy counts
		nodeAlloc          string // alloc of this node's node entry
		schedulable        bool
		changed            bool // the plugin and its volume take a new index
	}{
		{"a healthy node fingerprint makes the volume schedulable",
			[]*messages.CSIFingerprint{catNodeFingerprint("hostpath", "a1", true)}, 1, 0, "a1", true, true},
		{"the same fingerprint again changes nothing",
			[]*messages.CSIFingerprint{catNodeFingerprint("hostpath", "a1", true)}, 1, 0, "a1", true, false},
		{"an unhealthy controller counts apart and does not matter when not required",
			[]*messages.CSIFingerprint{catControllerFingerprint("hostpath", "c1", false)}, 1, 0, "a1", true, true},
		{"a healthy controller counts",
			[]*messages.CSIFingerprint{catControllerFingerprint("hostpath", "c1", true)}, 1, 1, "a1", true, true},
		{"the node plugin turning unhealthy makes the volume unschedulable",
			[]*messages.CSIFingerprint{catNodeFingerprint("hostpath", "a1", false)}, 0, 1, "a1", false, true},
		{"a new alloc's healthy fingerprint replaces the old alloc's",
			[]*messages.CSIFingerprint{catNodeFingerprint("hostpath", "a2", true)}, 1, 1, "a2", true, true},
		{"the replaced alloc's late final fingerprint is ignored",
			[]*messages.CSIFingerprint{catStoppedFingerprint("hostpath", "a1")}, 1, 1, "a2", true, false},
		{"the current alloc's final fingerprint counts as unhealthy",
			[]*messages.CSIFingerprint{catStoppedFingerprint("hostpath", "a2")}, 0, 1, "a2", false, true},
		{"a new alloc coming back is healthy again",
			[]*messages.CSIFingerprint{catNodeFingerprint("hostpath", "a3", true)}, 1, 1, "a3", true, true},
	}
	var lastIndex uint64
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			f.feed(step.send...)
			p := f.plugin("hostpath")
			require.Equal(t, step.nodes, p.NodesHealthy)
			require.Equal(t, step.controllers, p.ControllersHealthy)
			require.Equal(t, step.nodeAlloc, p.Nodes[catNode].AllocID)
			require.Equal(t, "hostpath.csi.k8s.io", p.Provider)
			v := f.volume("", "db")
			require.Equal(t, model.PluginHealth(p), v.Health, "the volume's health follows its plugin")
			require.Equal(t, step.schedulable, v.Schedulable)
			if step.changed {
				require.Greater(t, p.ModifyIndex, lastIndex)
			} else {
				require.Equal(t, lastIndex, p.ModifyIndex)
			}
			lastIndex = p.ModifyIndex
			other := f.volume("", "other")
			require.False(t, other.Schedulable, "a volume of another plugin is untouched")
			require.Equal(t, uint64(2), other.ModifyIndex)
		})
	}

	t.Run("health events and failures alone change nothing", func(t *testing.T) {
		before := f.dump()
		f.manager.Send(f.cat.PID(), &messages.CSIPluginHealthChanged{Type: csi.TypeNode, Name: "hostpath", AllocId: "a3"})
		f.manager.Send(f.cat.PID(), &messages.CSIPluginFailed{Type: csi.TypeNode, Name: "hostpath", AllocId: "a3"})
		f.settle()
		require.Equal(t, before, f.dump())
	})
}
