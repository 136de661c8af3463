package fleet_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

// batch is n volumes named prefix-0 … prefix-(n-1).
func batch(prefix string, n int) []*model.CSIVolume {
	vs := make([]*model.CSIVolume, n)
	for i := range vs {
		vs[i] = volume(fmt.Sprintf("%s-%d", prefix, i), model.AccessModeMultiNodeReader)
	}
	return vs
}

// ids lists the IDs of the fleet's volumes.
func ids(t *testing.T, s *fleet.Store) []string {
	t.Helper()
	list, err := s.ListVolumes(testCtx(t), "")
	require.NoError(t, err)
	out := []string{}
	for _, v := range list {
		out = append(out, v.ID)
	}
	return out
}

func TestAFleetRegistersAndDeregistersABatchAllOrNothing(t *testing.T) {
	srv := etcdtest.Start(t)
	s := open(t, srv, "node-a")
	ctx := testCtx(t)
	healthyNode(t, s)
	registered(t, s, withExternal("old", "disk-1"))

	out, err := s.RegisterVolumes(ctx, batch("v", model.MaxBatch))
	require.NoError(t, err, "a batch of model.MaxBatch fits one etcd transaction")
	require.Len(t, out, model.MaxBatch)
	for i, v := range out {
		require.Equal(t, fmt.Sprintf("v-%d", i), v.ID)
		require.Equal(t, out[0].ModifyIndex, v.ModifyIndex, "one transaction")
		require.True(t, v.Schedulable, "the answer carries the plugin's health")
	}
	before := ids(t, s)

	conflict := batch("w", 3)
	conflict[1].ExternalID = "disk-1"
	_, err = s.RegisterVolumes(ctx, conflict)
	require.ErrorIs(t, err, model.ErrVolumeConflict)
	require.ErrorContains(t, err, `volumes[1] (volume "w-1")`)
	require.ErrorContains(t, err, `already catalog volume "old"`)
	require.Equal(t, before, ids(t, s), "nothing of the batch was registered")

	within := batch("w", 2)
	within[0].ExternalID, within[1].ExternalID = "disk-9", "disk-9"
	_, err = s.RegisterVolumes(ctx, within)
	require.ErrorIs(t, err, model.ErrVolumeConflict)
	require.ErrorContains(t, err, `volumes[1] (volume "w-1")`)
	require.Equal(t, before, ids(t, s))

	_, err = s.RegisterVolumes(ctx, batch("v", model.MaxBatch+1))
	require.ErrorIs(t, err, model.ErrInvalid)
	require.ErrorContains(t, err, "over the limit of 25")

	_, err = s.Claim(ctx, "", "v-3", readClaim("a1", "node-a"))
	require.NoError(t, err)
	err = s.DeregisterVolumes(ctx, "", []string{"v-1", "v-3", "v-5"})
	require.ErrorIs(t, err, model.ErrVolumeInUse)
	require.ErrorContains(t, err, `volumes[1] (volume "v-3")`)
	require.Equal(t, before, ids(t, s), "nothing of the batch was deregistered")

	require.NoError(t, s.DeregisterVolumes(ctx, "", []string{"v-1", "old", "v-5"}))
	require.NotContains(t, ids(t, s), "old")
	registered(t, s, withExternal("new", "disk-1")) // the plugin volume entry went with its volume
}

// TestConcurrentBatchesNeverPassTheVolumeLimit has batches from three
// nodes race for a fleet of 10: each batch is taken whole or refused
// whole, and the fleet holds exactly the volumes of the batches taken,
// never more than 10; deregistering a batch frees its places.
func TestConcurrentBatchesNeverPassTheVolumeLimit(t *testing.T) {
	srv := etcdtest.Start(t)
	limit := func(c *fleet.Config) { c.MaxVolumes = 10 }
	stores := []*fleet.Store{open(t, srv, "node-a", limit), open(t, srv, "node-b", limit), open(t, srv, "node-c", limit)}
	ctx := testCtx(t)
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = stores[i%3].RegisterVolumes(ctx, batch(fmt.Sprintf("b%d", i), 3))
		})
	}
	wg.Wait()
	var taken []string
	for i, err := range errs {
		if err != nil {
			require.ErrorIs(t, err, model.ErrVolumeLimit)
			continue
		}
		for _, v := range batch(fmt.Sprintf("b%d", i), 3) {
			taken = append(taken, v.ID)
		}
	}
	require.Len(t, taken, 9, "three batches of 3 fit in 10, a fourth does not")
	require.ElementsMatch(t, taken, ids(t, stores[0]), "the fleet holds the volumes of the batches taken, whole")

	_, err := stores[1].RegisterVolumes(ctx, batch("late", 2))
	require.ErrorIs(t, err, model.ErrVolumeLimit)
	require.ErrorContains(t, err, `volumes[1] (volume "late-1")`)
	require.ErrorContains(t, err, "holds 10 volumes", "the first of the batch counted before the second was refused")
	require.Len(t, ids(t, stores[0]), 9)

	require.NoError(t, stores[2].DeregisterVolumes(ctx, "", taken[:3]))
	_, err = stores[0].RegisterVolumes(ctx, batch("late", 4))
	require.NoError(t, err, "the places freed by a batch are taken by the next")
	require.Len(t, ids(t, stores[0]), 10)
}
