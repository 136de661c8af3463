package fleet_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

// BenchmarkRegister registers new volumes in a fleet that holds 100, then
// 5,000, then 10,000 volumes already (one embedded etcd, the volumes
// written by fleet.Fill): one caller at 100 and 10,000, whose p50s are
// to be within 1.5x of each other (a registration reads and guards a fixed
// number of keys), and 8 callers on 2 nodes at 5,000, every one of whose
// registrations must succeed (it reports the failures, 0 expected).
func BenchmarkRegister(b *testing.B) {
	srv := etcdtest.Start(b)
	stores := []*fleet.Store{
		open(b, srv, "node-a", func(c *fleet.Config) { c.RequestTimeout = fleet.DefaultRequestTimeout }),
		open(b, srv, "node-b", func(c *fleet.Config) { c.RequestTimeout = fleet.DefaultRequestTimeout }),
	}
	held := 0
	fillTo := func(b *testing.B, n int) {
		var vols []*model.CSIVolume
		for ; held < n; held++ {
			vols = append(vols, volume(fmt.Sprintf("fill-%d", held), model.AccessModeSingleNodeWriter))
		}
		require.NoError(b, fleet.Fill(testCtx(b), stores[0], vols))
	}
	var next atomic.Int64
	run := func(b *testing.B, at, callers int) {
		fillTo(b, at)
		var mu sync.Mutex
		var took []time.Duration
		var failed atomic.Int64
		var wg sync.WaitGroup
		per := max(1, b.N/callers)
		b.ResetTimer()
		for c := range callers {
			wg.Go(func() {
				mine := make([]time.Duration, 0, per)
				for range per {
					v := volume(fmt.Sprintf("new-%d", next.Add(1)), model.AccessModeSingleNodeWriter)
					t0 := time.Now()
					if _, err := stores[c%2].RegisterVolume(context.Background(), v); err != nil {
						failed.Add(1)
						b.Log(err)
					}
					mine = append(mine, time.Since(t0))
				}
				mu.Lock()
				took = append(took, mine...)
				mu.Unlock()
			})
		}
		wg.Wait()
		b.StopTimer()
		held += per * callers
		b.ReportMetric(float64(percentileOf(took, 0.50).Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(percentileOf(took, 0.99).Microseconds())/1000, "p99-ms")
		b.ReportMetric(float64(failed.Load()), "failures")
	}
	b.Run("1 caller at 100 volumes", func(b *testing.B) { run(b, 100, 1) })
	b.Run("8 callers at 5000 volumes", func(b *testing.B) { run(b, 5_000, 8) })
	b.Run("1 caller at 10000 volumes", func(b *testing.B) { run(b, 10_000, 1) })
}

// percentileOf is the p-th percentile of ds (sorted in place).
func percentileOf(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(float64(len(ds))*p))]
}
