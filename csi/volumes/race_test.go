package volumes_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/volumes"
)

// TestWritersRacingForOneSingleWriterVolumeLeaveExactlyOneMounted mounts one
// single-node-writer volume for several allocs at once, against the strict
// reference plugin. Exactly one alloc wins and is published; every other
// is refused as a second writer, holds no claim and has no publish record;
// once the winner unmounts, another writer can mount.
func TestWritersRacingForOneSingleWriterVolumeLeaveExactlyOneMounted(t *testing.T) {
	n := newNode(t, nil)
	p := newStrictPlugin(t, n, "hp")
	p.create(n, "vol", "hp", model.AccessModeSingleNodeWriter)

	allocs := []string{"w-0", "w-1", "w-2", "w-3", "w-4", "w-5"}
	errs := make([]error, len(allocs))
	var wg sync.WaitGroup
	for i, alloc := range allocs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = n.manager.Mount(ctx, "", "vol", alloc, false)
		}()
	}
	wg.Wait()

	var winners []string
	for i, err := range errs {
		if err == nil {
			winners = append(winners, allocs[i])
			continue
		}
		require.ErrorIs(t, err, volumes.ErrClaimRefused, "alloc %s lost the race as a second writer", allocs[i])
	}
	require.Len(t, winners, 1, "exactly one writer mounts")
	writers, readers, _ := n.catalog.claims("vol")
	require.Equal(t, winners, writers, "only the winner holds a claim")
	require.Empty(t, readers)
	st := n.settle("vol")
	require.Len(t, st.Record.GetPublishes(), 1, "only the winner has a publish record")
	_, published, violations := p.state()
	require.Len(t, published, 1)
	require.Empty(t, violations)

	require.NoError(t, n.manager.Unmount(ctx, "", "vol", winners[0]))
	loser := allocs[0]
	if loser == winners[0] {
		loser = allocs[1]
	}
	_, err := n.manager.Mount(ctx, "", "vol", loser, false)
	require.NoError(t, err, "the volume is free for another writer once the winner unmounts")
	require.NoError(t, n.manager.Unmount(ctx, "", "vol", loser))
}
