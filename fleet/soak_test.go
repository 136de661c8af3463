package fleet_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

// BenchmarkSoak runs b.N claims and releases (alternately, 8 callers, each
// on volumes of its own) on 100 single-node-writer volumes of one embedded etcd, and reports what
// the history costs: the etcd revisions written, the db file before and
// after, the part of it in use, and the revisions still kept at the end.
// "compaction off" is the baseline; "compaction on" runs the fleet's
// Compactor every second. `make bench-soak` runs it with 100,000 ops.
func BenchmarkSoak(b *testing.B) {
	for _, compact := range []bool{false, true} {
		name := "compaction off"
		if compact {
			name = "compaction on"
		}
		b.Run(name, func(b *testing.B) { benchSoak(b, compact) })
	}
}

func benchSoak(b *testing.B, compact bool) {
	const volumes, callers = 100, 8
	srv := etcdtest.Start(b)
	client := rawClient(b, srv)
	s := open(b, srv, "node-a", func(c *fleet.Config) { c.LeaseTTL, c.RequestTimeout = fleet.DefaultLeaseTTL, timeout })
	healthyNode(b, s)
	for i := range volumes {
		registered(b, s, volume(fmt.Sprintf("v%03d", i), model.AccessModeSingleNodeWriter))
	}
	var compactor *fleet.Compactor
	if compact {
		var err error
		compactor, err = fleet.StartCompactor(s, fleet.CompactConfig{Interval: time.Second})
		require.NoError(b, err)
		defer compactor.Stop()
	}
	ctx := context.Background()
	dbSize := func() (int64, int64) {
		size, inUse, err := fleet.DBSize(ctx, fleet.Access{Endpoints: srv.Endpoints()})
		require.NoError(b, err)
		return size, inUse
	}
	revision := func() int64 {
		resp, err := client.Get(ctx, "revision")
		require.NoError(b, err)
		return resp.Header.Revision
	}
	sizeBefore, _ := dbSize()
	revBefore := revision()

	b.ResetTimer()
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			own, alloc := (volumes-c+callers-1)/callers, fmt.Sprintf("alloc-%d", c) // caller c's volumes: c, c+callers, ... below 100
			for i := range b.N / callers {
				id := fmt.Sprintf("v%03d", c+callers*((i/2)%own))
				var err error
				if i%2 == 0 {
					_, err = s.Claim(ctx, "", id, writeClaim(alloc, "node-a"))
				} else {
					_, err = s.Release(ctx, "", id, free(alloc))
				}
				if err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()

	revAfter := revision()
	if compact { // one more interval: the history of the last one goes too
		require.Eventually(b, func() bool { return compactor.Compacted() >= revAfter }, time.Minute, 100*time.Millisecond)
	}
	sizeAfter, inUse := dbSize()
	kept := revAfter - 1
	if compact {
		kept = revAfter - compactor.Compacted()
	}
	b.ReportMetric(float64(revAfter-revBefore), "revisions")
	b.ReportMetric(float64(sizeBefore), "db-bytes-before")
	b.ReportMetric(float64(sizeAfter), "db-bytes-after")
	b.ReportMetric(float64(inUse), "db-in-use-bytes")
	b.ReportMetric(float64(kept), "revisions-kept")
}
