package fleet_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

// TestAWriteByAnotherPathBetweenTwoCachedClaimsIsKept warms a grain's
// cache with a claim, has the volume written by another path (a claim
// through the plain Store, as another activation or the GC would write),
// and claims again from the now stale cache: both claims are in the
// answer and in etcd, and a release from the cache keeps the other's
// claim too.
func TestAWriteByAnotherPathBetweenTwoCachedClaimsIsKept(t *testing.T) {
	a, b, ctx := twoHealthyNodes(t)
	registered(t, a, volume("db", model.AccessModeMultiNodeMultiWriter))
	grain := a.Cached(&fleet.VolumeCache{})

	_, err := grain.Claim(ctx, "", "db", writeClaim("web-1", "node-a"))
	require.NoError(t, err)
	_, err = b.Claim(ctx, "", "db", writeClaim("web-2", "node-b"))
	require.NoError(t, err)
	v, err := grain.Claim(ctx, "", "db", writeClaim("web-3", "node-a"))
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"web-1", "web-2", "web-3"}, claimsOf(v))
	stored, err := a.GetVolume(ctx, "", "db")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"web-1", "web-2", "web-3"}, claimsOf(stored))
	require.Equal(t, stored.ModifyIndex, v.ModifyIndex)

	_, err = b.Release(ctx, "", "db", free("web-1"))
	require.NoError(t, err)
	v, err = grain.Release(ctx, "", "db", free("web-3"))
	require.NoError(t, err)
	require.Equal(t, []string{"web-2"}, claimsOf(v))
	stored, err = a.GetVolume(ctx, "", "db")
	require.NoError(t, err)
	require.Equal(t, []string{"web-2"}, claimsOf(stored))
}

// TestARegistrationThroughTheCacheKeepsWhatOthersWriteAfter registers a
// volume through a grain's cache, has another path record its capacity,
// and claims from the cache: the claim keeps the capacity.
func TestARegistrationThroughTheCacheKeepsWhatOthersWriteAfter(t *testing.T) {
	srv := etcdtest.Start(t)
	a := open(t, srv, "node-a")
	healthyNode(t, a)
	ctx := testCtx(t)
	grain := a.Cached(&fleet.VolumeCache{})
	_, err := grain.RegisterVolume(ctx, volume("db", model.AccessModeSingleNodeWriter))
	require.NoError(t, err)
	_, err = a.RecordVolumeCapacity(ctx, "", "db", 1<<30)
	require.NoError(t, err)
	v, err := grain.Claim(ctx, "", "db", writeClaim("web-1", "node-a"))
	require.NoError(t, err)
	require.EqualValues(t, 1<<30, v.CapacityBytes)
	stored, err := a.GetVolume(ctx, "", "db")
	require.NoError(t, err)
	require.EqualValues(t, 1<<30, stored.CapacityBytes)
	require.Equal(t, []string{"web-1"}, claimsOf(stored))
}

// TestAStaleCacheNeverGivesTwoWriters: a grain's cache says the writer
// slot of a single-node-writer volume is free, another path has since
// given it to node b: the grain's claim for node a is refused. And the
// other way round: the cache says the slot is taken, another path has
// since freed it: the grain's claim is not refused from the cache.
func TestAStaleCacheNeverGivesTwoWriters(t *testing.T) {
	a, b, ctx := twoHealthyNodes(t)
	registered(t, a, volume("db", model.AccessModeSingleNodeWriter))
	grain := a.Cached(&fleet.VolumeCache{})

	_, err := grain.Claim(ctx, "", "db", writeClaim("web-1", "node-a"))
	require.NoError(t, err)
	_, err = grain.Release(ctx, "", "db", free("web-1"))
	require.NoError(t, err) // the cache: the slot is free
	_, err = b.Claim(ctx, "", "db", writeClaim("web-2", "node-b"))
	require.NoError(t, err)
	_, err = grain.Claim(ctx, "", "db", writeClaim("web-3", "node-a"))
	require.ErrorIs(t, err, csi.ErrClaimRefused)
	stored, err := a.GetVolume(ctx, "", "db")
	require.NoError(t, err)
	require.Equal(t, []string{"web-2"}, claimsOf(stored))

	// The cache now holds web-2's claim: freed elsewhere, the slot is
	// the grain's to give.
	_, err = b.Release(ctx, "", "db", free("web-2"))
	require.NoError(t, err)
	v, err := grain.Claim(ctx, "", "db", writeClaim("web-3", "node-a"))
	require.NoError(t, err)
	require.Equal(t, []string{"web-3"}, claimsOf(v))
}

// TestTwoWarmCachesOfOneVolumeGiveOneWriter is two activations of one
// volume's grain, each with a warm cache that says the writer slot is
// free, claiming it for two nodes at once, 200 times: one wins each time.
func TestTwoWarmCachesOfOneVolumeGiveOneWriter(t *testing.T) {
	a, b, ctx := twoHealthyNodes(t)
	registered(t, a, volume("db", model.AccessModeSingleNodeWriter))
	grains := []interface {
		Claim(context.Context, string, string, *model.Claim) (*model.CSIVolume, error)
		Release(context.Context, string, string, *model.Claim) (*model.CSIVolume, error)
	}{a.Cached(&fleet.VolumeCache{}), b.Cached(&fleet.VolumeCache{})}
	for round := range 200 {
		for i, g := range grains {
			_, err := g.Release(ctx, "", "db", free(fmt.Sprintf("w-%d-%d", round-1, i)))
			require.NoError(t, err) // warms the cache: the slot is free
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, g := range grains {
			wg.Go(func() {
				_, errs[i] = g.Claim(ctx, "", "db", writeClaim(fmt.Sprintf("w-%d-%d", round, i), fmt.Sprintf("node-%c", 'a'+i)))
			})
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			if err == nil {
				won++
			} else {
				require.ErrorIs(t, err, csi.ErrClaimRefused)
			}
		}
		require.Equal(t, 1, won, "round %d: %v", round, errs)
	}
}

// TestADrainAfterTheCacheWasWarmedRefusesTheClaim warms a grain's cache
// with node a's claim and release, drains node a, and claims from the
// cache, which has never read the drain: refused, and nothing written.
func TestADrainAfterTheCacheWasWarmedRefusesTheClaim(t *testing.T) {
	srv := etcdtest.Start(t)
	a, b := open(t, srv, "node-a"), open(t, srv, "node-b")
	healthyNode(t, a)
	ctx := testCtx(t)
	registered(t, a, volume("db", model.AccessModeMultiNodeMultiWriter))
	grain := a.Cached(&fleet.VolumeCache{})
	_, err := grain.Claim(ctx, "", "db", writeClaim("web-1", "node-a"))
	require.NoError(t, err)
	before, err := grain.Release(ctx, "", "db", free("web-1"))
	require.NoError(t, err)

	_, err = b.Drain(ctx, "node-a")
	require.NoError(t, err)
	_, err = grain.Claim(ctx, "", "db", writeClaim("web-2", "node-a"))
	require.ErrorIs(t, err, csi.ErrClaimRefused)
	require.ErrorContains(t, err, `node "node-a" is draining`)
	stored, err := a.GetVolume(ctx, "", "db")
	require.NoError(t, err)
	require.Equal(t, before.ModifyIndex, stored.ModifyIndex, "nothing was written")
}

// claimsOf are the allocs holding a claim on v.
func claimsOf(v *model.CSIVolume) []string {
	var out []string
	for _, c := range v.AllClaims() {
		out = append(out, c.AllocID)
	}
	return out
}
