package member_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/fleet/member"
	"github.com/plugvisor/plugvisor/internal/cputime"
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
	// memberHeap is the heap the members added, all together (negative
	// when the cluster stopped before them was still freeing its memory);
	// base the heap before the members started (the etcd's included).
	memberHeap int64
	base       uint64
	// started and registered are how long the members took to start and
	// the volumes to register.
	started, registered time.Duration
	// once holds the figures measured on the benchmark's first real run,
	// which the later runs report again.
	once *onceFigures
}

// onceFigures are the measurements of BenchmarkFleetOfTwentyMembers that
// change the cluster (a member is crashed) or take long (the grains go
// idle), made on its first real run.
type onceFigures struct {
	// each and queued are the two failovers (see failover).
	each, queued       failoverFigures
	races, oneWinner   int
	activeMiB, idleMiB float64
	bytesPerGrain      float64
	grains, grainsLeft int
}

// benchTTL is the lease of the benchmarks' members: the agent's default
// (fleet.DefaultLeaseTTL, 10 s). With 5 s, the benchmark's etcd (in its
// process, fsync on) stalled past the TTL on the loaded 2-core machine,
// every lease lapsed at once, and protoactor, which never takes back a
// member it saw leave, left members with an empty topology.
const benchTTL = fleet.DefaultLeaseTTL

// benchTimeout bounds each call to etcd in the benchmarks: longer than
// the agent's default (5 s), which a loaded machine's etcd overran in the
// setup; a call that overruns even this still fails the benchmark.
const benchTimeout = 3 * fleet.DefaultRequestTimeout

var (
	benchMu       sync.Mutex
	benchClusters = map[string]*benchCluster{}
	benchStops    []func()
)

func stopBenchClusters() {
	benchMu.Lock()
	defer benchMu.Unlock()
	stopBenchClustersLocked()
}

// stopBenchClustersLocked stops every cluster started so far, with its
// etcd, and forgets them; benchMu is held.
func stopBenchClustersLocked() {
	for i := len(benchStops) - 1; i >= 0; i-- {
		benchStops[i]()
	}
	benchStops = nil
	clear(benchClusters)
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
// (multi-node-multi-writer, so that claims never conflict, unless name
// ends in singleWriter: single-node-writer) through them; it is kept under
// name for the later runs of the benchmark. The clusters
// of the benchmarks before are stopped first, so that their members and
// etcd take no CPU, memory or GC time from this one's measures.
func startBenchCluster(b *testing.B, name string, n, volumes int, idle time.Duration) *benchCluster {
	b.Helper()
	benchMu.Lock()
	defer benchMu.Unlock()
	if c, ok := benchClusters[name]; ok {
		return c
	}
	stopBenchClustersLocked()
	c := &benchCluster{etcd: etcdtest.Start(&benchTB{B: b})}
	before := heap()
	c.base = before
	t0 := time.Now()
	for i := range n {
		m, err := member.Start(member.Config{
			Fleet:            fleet.Config{Endpoints: c.etcd.Endpoints(), NodeID: fmt.Sprintf("node-%d", i), LeaseTTL: benchTTL, RequestTimeout: benchTimeout},
			Address:          "127.0.0.1:0",
			GrainIdleTimeout: idle,
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
			"member %s sees %d members (%d blocked)", m.ID(), len(m.Members()), m.Cluster().GetBlockedMembers().Size())
	}
	c.memberHeap = int64(heap()) - int64(before)
	c.started = time.Since(t0)

	t0 = time.Now()
	c.volumes = make([]string, volumes)
	parallel(b, volumes, 32, func(i int) error {
		c.volumes[i] = fmt.Sprintf("vol-%d", i)
		v := model.NewCSIVolume(c.volumes[i], 0)
		v.PluginID, v.AccessMode, v.AttachmentMode = "ebs", model.AccessModeMultiNodeMultiWriter, model.AttachmentModeFileSystem
		if strings.HasSuffix(name, singleWriter) {
			v.AccessMode = model.AccessModeSingleNodeWriter
		}
		m := c.members[i%n]
		if err := register(m, v); err != nil {
			return fmt.Errorf("member %s, which sees %d members: %w", m.ID(), len(m.Members()), err)
		}
		return nil
	})
	c.registered = time.Since(t0)
	benchClusters[name] = c
	return c
}

// reportCPU reports the CPU time the process used since cpu per pair
// ("cpu-µs/pair"): every member's and etcd's, all in the process, or the
// bare baseline's etcd and clients.
func reportCPU(b *testing.B, cpu time.Duration) {
	b.ReportMetric(float64((cputime.Used()-cpu).Microseconds())/float64(b.N), "cpu-µs/pair")
}

// reportMemberHeap reports the heap each member of c added ("MiB/member"),
// unless the heap shrank meanwhile: the cluster stopped before c was
// still freeing its memory, and the figure would mean nothing.
func reportMemberHeap(b *testing.B, c *benchCluster) {
	if c.memberHeap > 0 {
		b.ReportMetric(float64(c.memberHeap)/float64(len(c.members))/(1<<20), "MiB/member")
	}
}

// register registers v through m, again when it lost the race for a
// count shard to the other registrations until its time ran out, or etcd
// did not answer in time, as on a machine loaded enough (both errors say
// to try again), after a pause that doubles from 100 ms, so that a
// stalled etcd is not pressed harder: the setup is not what the benchmark
// measures. The fifth failure fails the benchmark.
func register(m *member.Member, v *model.CSIVolume) error {
	pause := 100 * time.Millisecond
	for try := 1; ; try++ {
		_, err := m.Router().RegisterVolume(context.Background(), v)
		if err == nil || try == 5 || !errors.Is(err, model.ErrStore) && !errors.Is(err, model.ErrFleetUnavailable) {
			return err
		}
		time.Sleep(pause)
		pause *= 2
	}
}

// parallel runs f(0..n-1) on workers goroutines and requires every call to
// succeed; after a failure the workers take no more calls.
func parallel(b *testing.B, n, workers int, f func(i int) error) {
	b.Helper()
	var next atomic.Int64
	var failed atomic.Bool
	errs := make(chan error, workers)
	for range workers {
		go func() {
			var first error
			for i := int(next.Add(1)) - 1; i < n && !failed.Load(); i = int(next.Add(1)) - 1 {
				if err := f(i); err != nil && first == nil {
					first = err
					failed.Store(true)
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

// singleWriter ends the name of a cluster whose volumes take one writer.
const singleWriter = "/single-writer"

// claimRelease claims volume v for alloc on member m and frees it again; it
// returns how long the claim took, and whether it was refused because
// another alloc held the volume's one writer slot (then there is nothing
// to free).
func claimRelease(m *member.Member, v, alloc, node string) (time.Duration, bool, error) {
	ctx := context.Background()
	start := time.Now()
	_, err := m.Router().Claim(ctx, "", v, &model.Claim{
		AllocID: alloc, NodeID: node, Mode: model.ClaimModeWrite, State: model.ClaimStateTaken,
	})
	took := time.Since(start)
	if errors.Is(err, model.ErrVolumeMaxClaims) {
		return took, true, nil
	}
	if err != nil {
		return 0, false, err
	}
	_, err = m.Router().Release(ctx, "", v, &model.Claim{AllocID: alloc, State: model.ClaimStateReadyToFree})
	return took, false, err
}

// runCallers runs b.N claim-and-release pairs on callers goroutines per
// member, each on volumes picked at random, and reports the pairs per
// second, the claims' p99 and the share refused because another alloc
// held the volume ("gave-up-%"; a refused claim frees nothing). Its
// baseline, bare etcd doing what a claim does, is a benchmark of its own
// that runs alone (bare_bench_test.go).
func runCallers(b *testing.B, c *benchCluster, callers int) {
	b.Helper()
	var next, gaveUp atomic.Int64
	var mu sync.Mutex
	var took []time.Duration
	workers := callers * len(c.members)
	b.ResetTimer()
	cpu := cputime.Used()
	parallel(b, workers, workers, func(w int) error {
		m, node := c.members[w%len(c.members)], fmt.Sprintf("node-%d", w%len(c.members))
		rng := rand.New(rand.NewPCG(uint64(w), 7))
		var mine []time.Duration
		for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
			d, refused, err := claimRelease(m, c.volumes[rng.IntN(len(c.volumes))], fmt.Sprintf("alloc-%d", i), node)
			if err != nil {
				return err
			}
			if refused {
				gaveUp.Add(1)
			}
			mine = append(mine, d)
		}
		mu.Lock()
		took = append(took, mine...)
		mu.Unlock()
		return nil
	})
	b.StopTimer()
	reportCPU(b, cpu)
	p99 := percentile(took, 0.99)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
	b.ReportMetric(float64(p99.Microseconds())/1000, "claim-p99-ms")
	b.ReportMetric(100*float64(gaveUp.Load())/float64(b.N), "gave-up-%")
}

// BenchmarkClaimsThreeMembersEightCallers: 3 members, 8 callers on each,
// claiming and freeing 64 volumes through their grains. On single-writer
// volumes a claim gives up when another alloc holds the volume, as the
// bare baseline's does (BenchmarkBareEtcd/keys=64,clients=3,callers=8);
// on multi-writer volumes every claim is taken, and the claims of one
// volume wait for each other in its grain.
func BenchmarkClaimsThreeMembersEightCallers(b *testing.B) {
	for _, volumes := range []string{singleWriter, "/multi-writer"} {
		b.Run("volumes="+volumes[1:], func(b *testing.B) {
			c := startBenchCluster(b, "three"+volumes, 3, 64, 0)
			runCallers(b, c, 8)
			reportMemberHeap(b, c)
		})
	}
}

// BenchmarkClaimsOneMemberTwentyFourCallers: the 24 callers of
// BenchmarkClaimsThreeMembersEightCallers on one member, on single-writer
// volumes: every grain is local, so that the difference between the two
// is what the members' remote hops cost (2 of 3 requests of three
// members go to a grain on another member).
func BenchmarkClaimsOneMemberTwentyFourCallers(b *testing.B) {
	c := startBenchCluster(b, "one"+singleWriter, 1, 64, 0)
	runCallers(b, c, 24)
}

// BenchmarkClaimsOneHotVolumeThroughItsGrain: the same 24 callers on one
// multi-writer volume, whose grain runs their claims one at a time.
func BenchmarkClaimsOneHotVolumeThroughItsGrain(b *testing.B) {
	c := startBenchCluster(b, "hot", 3, 1, 0)
	runCallers(b, c, 8)
}

// BenchmarkFleetOfTwentyMembers is the simulation of a fleet: 20 members
// holding 10,000 volumes (each registered through its grain), one caller on
// each member claiming and freeing volumes at random (the baseline is
// BenchmarkBareEtcd/keys=10000,clients=20,callers=1); then, once, 1,000
// races of two members for the writer slot of a volume, the grains going
// idle (the heap after they passivated), and two members killed, one
// after the other (their leases are not revoked): the time until each of
// a killed member's volumes answers from the others is the failover time
// (see failover, claimEach and claimQueued).
func BenchmarkFleetOfTwentyMembers(b *testing.B) {
	c := startBenchCluster(b, "twenty", 20, 10_000, twentyIdle)
	runCallers(b, c, 1)
	b.ReportMetric(c.started.Seconds(), "start-s")
	b.ReportMetric(c.registered.Seconds(), "register-s")
	reportMemberHeap(b, c)
	if b.N == 1 {
		return // the first, probing run of the benchmark: the rest is measured on a real run
	}
	if c.once == nil {
		c.once = &onceFigures{}
		c.once.races, c.once.oneWinner = races(b, c, 1_000)
		if !testing.Short() { // -short: no wait for the grains to passivate
			c.once.activeMiB, c.once.idleMiB, c.once.grains, c.once.grainsLeft = idleHeap(b, c)
			c.once.bytesPerGrain = (c.once.activeMiB - c.once.idleMiB) * float64(len(c.members)) * (1 << 20) / float64(max(1, c.once.grains))
		}
		c.once.each = failover(b, c, claimEach)
		c.once.queued = failover(b, c, claimQueued)
	}
	b.ReportMetric(float64(c.once.oneWinner), "races-one-winner")
	b.ReportMetric(float64(c.once.races), "races")
	b.ReportMetric(c.once.activeMiB, "MiB/member-active")
	b.ReportMetric(c.once.idleMiB, "MiB/member-idle")
	b.ReportMetric(float64(c.once.grains), "grains-active")
	b.ReportMetric(c.once.bytesPerGrain, "B/grain")
	b.ReportMetric(float64(c.once.grainsLeft), "grains-left")
	c.once.each.report(b, "failover")
	c.once.queued.report(b, "failover-queued")
}

// twentyIdle is the grains' idle timeout in the fleet of twenty: longer
// than the setup and the claims, so that these measure the grain path
// without activations (with 10 s, nearly every claim of the random
// callers activated its grain again), short enough to wait for.
const twentyIdle = 90 * time.Second

// races registers n single-node-writer volumes, then has two members
// (nodes) claim each for writing at once, 20 races at a time; it returns
// n and how many races had exactly one winner, the loser refused.
func races(b *testing.B, c *benchCluster, n int) (int, int) {
	b.Helper()
	parallel(b, n, 32, func(i int) error {
		v := model.NewCSIVolume(fmt.Sprintf("race-%d", i), 0)
		v.PluginID, v.AccessMode, v.AttachmentMode = "ebs", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem
		return register(c.members[i%len(c.members)], v)
	})
	var one atomic.Int64
	parallel(b, n, 20, func(i int) error {
		won, refused := 0, 0
		var wg sync.WaitGroup
		var mu sync.Mutex
		for k := range 2 {
			m := (i + k) % len(c.members)
			wg.Go(func() {
				_, err := c.members[m].Router().Claim(context.Background(), "", fmt.Sprintf("race-%d", i), &model.Claim{
					AllocID: fmt.Sprintf("racer-%d-%d", i, k), NodeID: fmt.Sprintf("node-%d", m), Mode: model.ClaimModeWrite, State: model.ClaimStateTaken,
				})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					won++
				case errors.Is(err, csi.ErrClaimRefused):
					refused++
				}
			})
		}
		wg.Wait()
		if won == 1 && refused == 1 {
			one.Add(1)
		}
		return nil
	})
	return n, int(one.Load())
}

// idleHeap touches every volume (activating its grain), and measures the
// heap the members and their grains add (over the heap before they
// started, the in-process etcd's growth included), then waits for the
// grains to passivate (twentyIdle without a request) and measures it
// again: it returns both per member, the grains active at the first
// measure, and the grains left after a generous wait.
func idleHeap(b *testing.B, c *benchCluster) (active, idle float64, grains, left int) {
	b.Helper()
	count := func() int {
		n := 0
		for _, m := range c.members {
			n += m.Grains()
		}
		return n
	}
	perMember := func() float64 { return float64(int64(heap())-int64(c.base)) / float64(len(c.members)) / (1 << 20) }
	parallel(b, len(c.volumes), 32, func(i int) error {
		if c.members[i%len(c.members)].Router().Owner("", c.volumes[i]) == "" {
			return fmt.Errorf("no member answers for volume %s", c.volumes[i])
		}
		return nil
	})
	active, grains = perMember(), count()
	for deadline := time.Now().Add(2 * twentyIdle); count() > 0 && time.Now().Before(deadline); {
		time.Sleep(time.Second)
	}
	return active, perMember(), grains, count()
}
