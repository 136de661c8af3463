package registry_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTenThousandOldAllocs checks behaviour, not speed, with a deep history:
// BenchmarkRegisterWithOldAllocs measures that the cost does not grow.
func TestTenThousandOldAllocs(t *testing.T) {
	r, _ := newRegistry(t)
	const old = 10000
	for i := range old {
		require.NoError(t, r.RegisterPlugin(plugin(i)))
	}
	require.Len(t, r.Snapshot().Allocations(csiNode, "my-plugin"), old)
	require.Equal(t, fmt.Sprintf("alloc-%d", old-1), dispense(t, r).GetAllocId())

	require.NoError(t, r.DeregisterPlugin(csiNode, "my-plugin", fmt.Sprintf("alloc-%d", old-1)))
	require.Equal(t, fmt.Sprintf("alloc-%d", old-2), dispense(t, r).GetAllocId(), "the next newest is promoted")
	require.NoError(t, r.DeregisterPlugin(csiNode, "my-plugin", "alloc-0"))
	require.NoError(t, r.RegisterPlugin(plugin(old)))
	require.Equal(t, fmt.Sprintf("alloc-%d", old), dispense(t, r).GetAllocId())
	require.Len(t, r.Snapshot().Allocations(csiNode, "my-plugin"), old-1)
	require.Len(t, r.ListPlugins(csiNode), 1)
}
