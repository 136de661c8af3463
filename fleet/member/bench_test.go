package member_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/fleet/member"
	"github.com/plugvisor/plugvisor/messages"
)

// The benchmarks run their members in this process: protoactor's remote
// then races with the other members' gRPC on gRPC's global logger (see
// child_test.go), which is harmless outside the race detector, and the
// benchmarks never run under it in `make bench`. A cluster is started once
// per process and shared by the runs of its benchmark (go runs each
// benchmark more than once); TestMain stops them at the end.

// benchCluster is members on one embedded etcd, with volumes registered.
type benchCluster struct {
	etcd    *etcdtest.Server
	members []*member.Member
	volumes []string
	// memberHeap is the heap the members added, all together; grainHeap
	// the heap that registering the volumes added (a grain each).
	memberHeap, grainHeap uint64
	// failover is the failover time, once measured.
	failover time.Duration
}

var (
	benchMu       sync.Mutex
	benchClusters = map[string]*benchCluster{}
	benchStops    []func()
)

func stopBenchClusters() {
	benchMu.Lock()
	defer benchMu.Unlock()
	for i := len(benchStops) - 1; i >= 0; i-- {
		benchStops[i]()
	}
	benchStops = nil
}

// benchTB is the testing.TB of an etcd that outlives the benchmark run
// that started it: its temporary directory and cleanups go at the end of
// the process, with stopBenchClusters.
type benchTB struct{ *testing.B }

func (t *benchTB) Cleanup(f func()) { benchStops = append(benchStops, f) }

func (t *benchTB) TempDir() string {
	dir, err := os.MkdirTemp("", "member-bench")
	require.NoError(t.B, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// heap is the live heap after a collection.
func heap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// startBenchCluster starts n members on a fresh etcd and registers volumes
// (multi-node-multi-writer, so that claims never conflict) through them;
// it is kept under name for the later runs of the benchmark.
func startBenchCluster(b *testing.B, name string, n, volumes int) *benchCluster {
	b.Helper()
	benchMu.Lock()
	defer benchMu.Unlock()
	if c, ok := benchClusters[name]; ok {
		return c
	}
	c := &benchCluster{etcd: etcdtest.Start(&benchTB{B: b})}
	before := heap()
	for i := range n {
		m, err := member.Start(member.Config{
			Fleet:   fleet.Config{Endpoints: c.etcd.Endpoints(), NodeID: fmt.Sprintf("node-%d", i), LeaseTTL: 2 * time.Second},
			Address: "127.0.0.1:0",
		})
		require.NoError(b, err)
		benchStops = append(benchStops, func() { _ = m.Stop() })
		c.members = append(c.members, m)
		err = m.Router().PutFingerprints(context.Background(), []*messages.CSIFingerprint{{
			Type: "csi-node", Name: "ebs", AllocId: fmt.Sprintf("plugin-%d", i), Healthy: true,
			NodeInfo: &messages.CSINodeInfo{NodeId: fmt.Sprintf("csi-%d", i)},
		}})
		require.NoError(b, err)
	}
	for _, m := range c.members {
		require.Eventually(b, func() bool { return len(m.Members()) == n }, time.Minute, 50*time.Millisecond,
			"member %s sees %d members", m.ID(), len(m.Members()))
	}
	c.memberHeap = heap() - before

	before = heap()
	c.volumes = make([]string, volumes)
	parallel(b, volumes, 32, func(i int) error {
		c.volumes[i] = fmt.Sprintf("vol-%d", i)
		v := model.NewCSIVolume(c.volumes[i], 0)
		v.PluginID, v.AccessMode, v.AttachmentMode = "ebs", model.AccessModeMultiNodeMultiWriter, model.AttachmentModeFileSystem
		_, err := c.members[i%n].Router().RegisterVolume(context.Background(), v)
		return err
	})
	c.grainHeap = heap() - before
	benchClusters[name] = c
	return c
}

// parallel runs f(0..n-1) on workers goroutines and requires every call to
// succeed.
func parallel(b *testing.B, n, workers int, f func(i int) error) {
	b.Helper()
	var next atomic.Int64
	errs := make(chan error, workers)
	for range workers {
		go func() {
			var first error
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := f(i); err != nil && first == nil {
					first = err
				}
			}
			errs <- first
		}()
	}
	for range workers {
		require.NoError(b, <-errs)
	}
}

// percentile is the p-th percentile of ds (sorted in place).
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(float64(len(ds))*p))]
}

// claimRelease claims volume v for alloc on member m and frees it again; it
// returns how long the claim took.
func claimRelease(m *member.Member, v, alloc, node string) (time.Duration, error) {
	ctx := context.Background()
	start := time.Now()
	if _, err := m.Router().Claim(ctx, "", v, &model.Claim{
		AllocID: alloc, NodeID: node, Mode: model.ClaimModeWrite, State: model.ClaimStateTaken,
	}); err != nil {
		return 0, err
	}
	took := time.Since(start)
	_, err := m.Router().Release(ctx, "", v, &model.Claim{AllocID: alloc, State: model.ClaimStateReadyToFree})
	return took, err
}

// runCallers runs b.N claim-and-release pairs on callers goroutines per
// member, each on volumes picked at random, and reports the pairs per
// second and the claims' p99.
func runCallers(b *testing.B, c *benchCluster, callers int) {
	b.Helper()
	var next atomic.Int64
	var mu sync.Mutex
	var took []time.Duration
	workers := callers * len(c.members)
	b.ResetTimer()
	parallel(b, workers, workers, func(w int) error {
		m, node := c.members[w%len(c.members)], fmt.Sprintf("node-%d", w%len(c.members))
		rng := rand.New(rand.NewPCG(uint64(w), 7))
		var mine []time.Duration
		for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
			d, err := claimRelease(m, c.volumes[rng.IntN(len(c.volumes))], fmt.Sprintf("alloc-%d", i), node)
			if err != nil {
				return err
			}
			mine = append(mine, d)
		}
		mu.Lock()
		took = append(took, mine...)
		mu.Unlock()
		return nil
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
	b.ReportMetric(float64(percentile(took, 0.99).Microseconds())/1000, "claim-p99-ms")
}

// BenchmarkClaimsThreeMembersEightCallers: 3 members, 8 callers on each,
// claiming and freeing 64 volumes through their grains.
func BenchmarkClaimsThreeMembersEightCallers(b *testing.B) {
	c := startBenchCluster(b, "three", 3, 64)
	runCallers(b, c, 8)
	b.ReportMetric(float64(c.memberHeap)/float64(len(c.members))/(1<<20), "MiB/member")
}

// BenchmarkClaimsOneHotVolumeThroughItsGrain: the same 24 callers on one
// multi-writer volume, whose grain runs their claims one at a time.
func BenchmarkClaimsOneHotVolumeThroughItsGrain(b *testing.B) {
	c := startBenchCluster(b, "hot", 3, 1)
	runCallers(b, c, 8)
}

// BenchmarkFleetOfTwentyMembers is the simulation of a fleet: 20 members
// holding 10,000 volumes (each registered through its grain, which stays
// active), one caller on each member claiming and freeing volumes at random;
// then one member is killed (its lease is not revoked) and the time until
// each of its volumes answers from the others is the failover time.
func BenchmarkFleetOfTwentyMembers(b *testing.B) {
	c := startBenchCluster(b, "twenty", 20, 10_000)
	runCallers(b, c, 1)
	b.ReportMetric(float64(c.memberHeap)/float64(len(c.members))/(1<<20), "MiB/member")
	b.ReportMetric(float64(c.grainHeap)/float64(len(c.volumes)), "B/grain")
	if b.N == 1 {
		return // the first, probing run of the benchmark: the failover is measured on a real run
	}
	if c.failover == 0 {
		c.failover = failover(b, c) // once: the later runs report it again
	}
	b.ReportMetric(c.failover.Seconds(), "failover-s")
}

// failover crashes the cluster's last member and returns how long until
// every volume whose grain it hosted answers a claim from another member.
func failover(b *testing.B, c *benchCluster) time.Duration {
	b.Helper()
	victim, asker := c.members[len(c.members)-1], c.members[0]
	var orphans []string
	for _, v := range c.volumes {
		if asker.Router().Owner("", v) == victim.ID() {
			orphans = append(orphans, v)
		}
	}
	require.NotEmpty(b, orphans)
	c.members = c.members[:len(c.members)-1]
	victim.Crash()
	start := time.Now()
	parallel(b, len(orphans), 32, func(i int) error {
		_, err := claimRelease(asker, orphans[i], "failover-"+orphans[i], "node-0")
		return err
	})
	return time.Since(start)
}
