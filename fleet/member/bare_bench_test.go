package member_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/internal/cputime"
)

// The claim benchmarks' baseline: bare etcd doing what a claim does, on
// an etcd of its own with nothing else in the process (the clusters of the
// benchmarks before are stopped first), so that no member's work inflates
// it. Its callers and clients are those of the claim benchmark it stands
// beside: BenchmarkClaimsThreeMembersEightCallers against
// keys=64,clients=3,callers=8, BenchmarkFleetOfTwentyMembers against
// keys=10000,clients=20,callers=1. A claim's p99 and pairs per second are
// held to these in the same run of make bench-cluster.

// BenchmarkBareEtcd runs b.N bare claims (bareClaim), each released
// (bareRelease) when it took its key, from callers goroutines per client,
// on keys picked at random.
func BenchmarkBareEtcd(b *testing.B) {
	for _, shape := range []struct{ keys, clients, callers int }{{64, 3, 8}, {10_000, 20, 1}} {
		b.Run(fmt.Sprintf("keys=%d,clients=%d,callers=%d", shape.keys, shape.clients, shape.callers), func(b *testing.B) {
			runBare(b, startBareEtcd(b), shape.keys, shape.clients, shape.callers)
		})
	}
}

// startBareEtcd starts an etcd alone: the clusters started before are
// stopped first, and it is kept for the later runs of the benchmark.
func startBareEtcd(b *testing.B) *etcdtest.Server {
	b.Helper()
	benchMu.Lock()
	defer benchMu.Unlock()
	if c, ok := benchClusters["bare"]; ok {
		return c.etcd
	}
	stopBenchClustersLocked()
	c := &benchCluster{etcd: etcdtest.Start(&benchTB{B: b})}
	benchClusters["bare"] = c
	return c.etcd
}

// runBare is BenchmarkBareEtcd's body: it reports the claims per second
// ("pairs/s": each with its release when it took the key), their p99
// ("claim-p99-ms") and the share that gave up because another caller held
// the key ("gave-up-%").
func runBare(b *testing.B, etcd *etcdtest.Server, keys, clients, callers int) {
	b.Helper()
	cls := make([]*clientv3.Client, clients)
	for i := range cls {
		cl, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
		require.NoError(b, err)
		defer cl.Close()
		cls[i] = cl
	}
	var next, gaveUp atomic.Int64
	var mu sync.Mutex
	var took []time.Duration
	workers := clients * callers
	b.ResetTimer()
	cpu := cputime.Used()
	parallel(b, workers, workers, func(w int) error {
		ctx, cl := context.Background(), cls[w%clients]
		rng := rand.New(rand.NewPCG(uint64(w), 11))
		var mine []time.Duration
		for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
			key := fmt.Sprintf("bare/%d", rng.IntN(keys))
			start := time.Now()
			rev, err := bareClaim(ctx, cl, key, fmt.Sprintf("alloc-%d", i))
			if err != nil {
				return err
			}
			mine = append(mine, time.Since(start))
			if rev == 0 {
				gaveUp.Add(1)
			} else if err := bareRelease(ctx, cl, key, rev); err != nil {
				return err
			}
		}
		mu.Lock()
		took = append(took, mine...)
		mu.Unlock()
		return nil
	})
	b.StopTimer()
	reportCPU(b, cpu)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
	b.ReportMetric(float64(percentile(took, 0.99).Microseconds())/1000, "claim-p99-ms")
	b.ReportMetric(100*float64(gaveUp.Load())/float64(b.N), "gave-up-%")
}

// bareClaim does on bare etcd what a claim of a single-writer volume
// does: it reads key, gives up when another holds it, and puts holder
// guarded on the mod revision it read, giving up when the guard fails
// (another took the key meanwhile). It returns the revision of its put, 0
// when it gave up.
func bareClaim(ctx context.Context, cl *clientv3.Client, key, holder string) (int64, error) {
	got, err := cl.Get(ctx, key)
	if err != nil {
		return 0, err
	}
	rev := int64(0)
	if len(got.Kvs) > 0 {
		if len(got.Kvs[0].Value) > 0 {
			return 0, nil
		}
		rev = got.Kvs[0].ModRevision
	}
	resp, err := cl.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpPut(key, holder)).Commit()
	if err != nil || !resp.Succeeded {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// bareRelease frees key, which the caller took at revision rev: the empty
// value put guarded on rev, as a release's write is guarded on what its
// grain read.
func bareRelease(ctx context.Context, cl *clientv3.Client, key string, rev int64) error {
	_, err := cl.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpPut(key, "")).Commit()
	return err
}
