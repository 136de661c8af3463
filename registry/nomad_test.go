package registry_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
)

// The scenarios of Nomad's TestDynamicRegistry_ConcurrentAllocs, against
// a store that round-trips real bytes (Nomad's test store keeps pointers,
// which is how its empty-map encoding went unnoticed).
func TestConcurrentAllocs(t *testing.T) {
	t.Run("restore races on client restart", func(t *testing.T) {
		system := probe.NewSystem(t)
		bucket := memoryBucket(t)
		old := start(t, system, bucket, echoDispensers())
		require.NoError(t, old.RegisterPlugin(plugin(0)))
		require.NoError(t, old.RegisterPlugin(plugin(1)))
		require.Equal(t, "alloc-1", dispense(t, old).GetAllocId())
		require.NoError(t, old.Shutdown())

		// The client restarts and restores from disk: the newest is current.
		restarted := start(t, system, bucket, echoDispensers())
		current := dispense(t, restarted)
		require.Equal(t, "alloc-1", current.GetAllocId())
		require.Equal(t, "/var/data/alloc/alloc-1/csi.sock", current.GetConnection().GetSocketPath())

		// Allocations are restored in the opposite order they were made:
		// the older one re-registers and must not displace the newer.
		require.NoError(t, restarted.RegisterPlugin(plugin(0)))
		require.Equal(t, "alloc-1", dispense(t, restarted).GetAllocId())
	})

	t.Run("replacement races on host restart", func(t *testing.T) {
		system := probe.NewSystem(t)
		bucket := memoryBucket(t)
		old := start(t, system, bucket, echoDispensers())
		require.NoError(t, old.RegisterPlugin(plugin(0)))
		require.NoError(t, old.RegisterPlugin(plugin(1)))
		require.NoError(t, old.Shutdown())

		// The whole host restarted: no old alloc runs; the server sends a
		// replacement.
		restarted := start(t, system, bucket, echoDispensers())
		require.Equal(t, "alloc-1", dispense(t, restarted).GetAllocId())
		require.NoError(t, restarted.RegisterPlugin(plugin(2)))
		current := dispense(t, restarted)
		require.Equal(t, "alloc-2", current.GetAllocId())
		require.Equal(t, "/var/data/alloc/alloc-2/csi.sock", current.GetConnection().GetSocketPath())
	})

	t.Run("interleaved register and deregister", func(t *testing.T) {
		r, _ := newRegistry(t)
		require.NoError(t, r.RegisterPlugin(plugin(0)))
		// The replacement registers before the old plugin deregisters.
		require.NoError(t, r.RegisterPlugin(plugin(1)))
		require.Equal(t, "alloc-1", dispense(t, r).GetAllocId())
		require.NoError(t, r.DeregisterPlugin(csiNode, "my-plugin", "alloc-0"))
		require.Equal(t, "alloc-1", dispense(t, r).GetAllocId())
	})
}

func TestStateStoreRoundTrip(t *testing.T) {
	system := probe.NewSystem(t)
	bucket := memoryBucket(t)
	first := start(t, system, bucket, nil)
	withOptions := pluginNamed("opts", 4)
	withOptions.Options = map[string]string{"mount-dir": "/csi", "stage-publish": "true"}
	require.NoError(t, first.RegisterPlugin(plugin(0)))
	require.NoError(t, first.RegisterPlugin(plugin(1)))
	require.NoError(t, first.RegisterPlugin(withOptions))
	want := first.Snapshot()
	require.NoError(t, first.Shutdown())

	second := start(t, system, bucket, nil)
	got := second.Snapshot()
	require.Equal(t, want.Types(), got.Types())
	require.Equal(t, allocIDs(want.Allocations(csiNode, "my-plugin")), allocIDs(got.Allocations(csiNode, "my-plugin")))
	opts, ok := got.Current(csiNode, "opts")
	require.True(t, ok)
	require.Equal(t, withOptions.GetOptions(), opts.GetOptions())
	require.Equal(t, withOptions.GetConnection().GetSocketPath(), opts.GetConnection().GetSocketPath())
}
