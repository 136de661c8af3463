package fleet_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

// TestTwoNodesRacingForOneWriterSlotNeverBothWin runs 1,000 races of two
// nodes, each claiming a single-node-writer volume for writing at the same
// moment: each race ends with exactly one winner, whose claim is the only
// one on the volume, and the loser refused.
func TestTwoNodesRacingForOneWriterSlotNeverBothWin(t *testing.T) {
	const races = 1000
	srv := etcdtest.Start(t)
	nodes := []string{"node-a", "node-b"}
	a, b := open(t, srv, nodes[0]), open(t, srv, nodes[1])
	healthyNode(t, a)
	healthyNode(t, b)
	stores := []*fleet.Store{a, b}
	registered(t, a, volume("db", model.AccessModeSingleNodeWriter))
	wins := map[string]int{}
	for race := range races {
		// A deadline per race, not one for all of them: a loaded machine
		// makes the thousand slow, not any one of them.
		ctx := testCtx(t)
		var errs [2]error
		var start, done sync.WaitGroup
		start.Add(1)
		for i, s := range stores {
			done.Add(1)
			go func() {
				defer done.Done()
				start.Wait()
				_, errs[i] = s.Claim(ctx, "", "db", writeClaim(fmt.Sprintf("alloc-%d-%d", race, i), nodes[i]))
			}()
		}
		start.Done()
		done.Wait()
		winner := -1
		for i, err := range errs {
			if err == nil {
				require.Equal(t, -1, winner, "race %d: both nodes won", race)
				winner = i
				continue
			}
			require.ErrorIs(t, err, csi.ErrClaimRefused, "race %d: the loser is refused, not failed", race)
		}
		require.NotEqual(t, -1, winner, "race %d: nobody won", race)
		v, err := a.GetVolume(ctx, "", "db")
		require.NoError(t, err)
		alloc := fmt.Sprintf("alloc-%d-%d", race, winner)
		require.Len(t, v.WriteClaims, 1, "race %d", race)
		require.Contains(t, v.WriteClaims, alloc, "race %d", race)
		require.Equal(t, nodes[winner], v.WriteClaims[alloc].NodeID)
		_, err = stores[winner].Release(ctx, "", "db", free(alloc))
		require.NoError(t, err)
		wins[nodes[winner]]++
	}
	t.Logf("wins after %d races: %v", races, wins)
}
