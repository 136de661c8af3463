package fleet_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

// BenchmarkClaimRelease runs claims and releases from 3 nodes with 8
// callers each, on one embedded etcd. Each op is a claim or a release,
// alternately. "own volume": each caller has a single-node-writer volume
// of its own; "one volume": all 24 share a multi-node-multi-writer volume,
// so that their transactions conflict and retry. It reports ns/op (wall
// time over all callers), ops/s, the p99 latency of one op, and the etcd
// writes (revisions) per op: a lost race writes nothing.
func BenchmarkClaimRelease(b *testing.B) {
	for _, shared := range []bool{false, true} {
		name := "own volume"
		if shared {
			name = "one volume"
		}
		b.Run(name, func(b *testing.B) { benchClaimRelease(b, shared) })
	}
}

func benchClaimRelease(b *testing.B, shared bool) {
	const nodes, callers = 3, 8
	srv := etcdtest.Start(b)
	stores := make([]*fleet.Store, nodes)
	for i := range stores {
		stores[i] = open(b, srv, fmt.Sprintf("node-%d", i), func(c *fleet.Config) {
			// 24 writers of one record starve one another now and then
			// for seconds: the max shows it; the benchmark must not fail.
			c.LeaseTTL, c.RequestTimeout = fleet.DefaultLeaseTTL, timeout
		})
		healthyNode(b, stores[i])
	}
	volumeOf := func(node, caller int) string {
		if shared {
			return "shared"
		}
		return fmt.Sprintf("v-%d-%d", node, caller)
	}
	mode := model.AccessModeSingleNodeWriter
	if shared {
		mode = model.AccessModeMultiNodeMultiWriter
	}
	for n := range nodes {
		for c := range callers {
			registered(b, stores[0], volume(volumeOf(n, c), mode))
		}
	}
	client, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: timeout})
	require.NoError(b, err)
	defer client.Close()
	revision := func() int64 {
		resp, err := client.Get(context.Background(), "revision")
		require.NoError(b, err)
		return resp.Header.Revision
	}

	perCaller := max(1, b.N/(nodes*callers))
	latencies := make([][]time.Duration, nodes*callers)
	var wg sync.WaitGroup
	before := revision()
	b.ResetTimer()
	start := time.Now()
	for n := range nodes {
		for c := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, id, alloc := stores[n], volumeOf(n, c), fmt.Sprintf("alloc-%d-%d", n, c)
				own := make([]time.Duration, 0, perCaller)
				for i := range perCaller {
					t0 := time.Now()
					var err error
					if i%2 == 0 {
						_, err = s.Claim(context.Background(), "", id, writeClaim(alloc, s.NodeID()))
					} else {
						_, err = s.Release(context.Background(), "", id, free(alloc))
					}
					own = append(own, time.Since(t0))
					if err != nil {
						b.Error(err)
						return
					}
				}
				latencies[n*callers+c] = own
			}()
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	ops := perCaller * nodes * callers
	all := slices.Concat(latencies...)
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)*99/100].Nanoseconds()), "p99-ns")
		b.ReportMetric(float64(all[len(all)-1].Nanoseconds()), "max-ns")
	}
	b.ReportMetric(float64(ops)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(float64(revision()-before)/float64(ops), "etcd-writes/op")
}
