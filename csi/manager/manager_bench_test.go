package manager_test

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/manager"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/supervisor"
)

// fleetSize is how many plugins the benchmarks run at once.
const fleetSize = 1000

// benchFingerprints fingerprint once a minute, leave RPCs time enough on
// a busy machine, and retry soon: with a thousand connections made at once
// a few need a second try.
var benchFingerprints = manager.FingerprintOptions{Interval: time.Minute, Retry: 100 * time.Millisecond, RPCTimeout: 30 * time.Second}

// fleet is a harness whose registry holds fleetSize node plugins, "p0" to
// "p999", alloc "a", each on a socket of its own. When served, the
// reference hostpath plugin, in-process on one gRPC server, listens on
// every socket; probes counts the Probe calls it answered.
type fleet struct {
	*harness
	probes atomic.Int64
}

func newFleet(b *testing.B, served bool) *fleet {
	b.Helper()
	f := &fleet{harness: newHarness(b)}
	driver, err := hostpath.New(hostpath.Config{Name: "hostpath", NodeID: "bench", Root: b.TempDir(), Mode: hostpath.ModeNode})
	if err != nil {
		b.Fatal(err)
	}
	server := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		if info.FullMethod == "/csi.v1.Identity/Probe" {
			f.probes.Add(1)
		}
		return next(ctx, req)
	}))
	driver.Register(server)
	b.Cleanup(server.Stop)
	for i := range fleetSize {
		socket := f.socket()
		if served {
			l, err := net.Listen("unix", socket)
			if err != nil {
				b.Fatal(err)
			}
			go func() { _ = server.Serve(l) }()
		}
		f.register(b, csi.TypeNode, fmt.Sprintf("p%d", i), "a", socket)
	}
	return f
}

// awaitFleetHealth waits until every plugin of the fleet has changed its
// health to healthy (or to unhealthy), other events skipped.
func (f *fleet) awaitFleetHealth(b *testing.B, healthy bool) {
	b.Helper()
	seen := map[string]bool{}
	for len(seen) < fleetSize {
		probe.FishFor(b, f.events, time.Minute, func(e *messages.CSIPluginHealthChanged) bool {
			if e.GetHealthy() == healthy {
				seen[e.GetName()] = true
			}
			return true
		})
	}
}

// BenchmarkManagerStartsAThousandPlugins measures the time from the manager's
// start, with 1,000 plugins registered, until all report healthy.
func BenchmarkManagerStartsAThousandPlugins(b *testing.B) {
	for range b.N {
		b.StopTimer()
		f := newFleet(b, true)
		b.StartTimer()
		start := time.Now()
		f.start(b, func(c *manager.Config) { c.Fingerprint = benchFingerprints })
		f.awaitFleetHealth(b, true)
		b.ReportMetric(float64(time.Since(start).Milliseconds()), "ms-until-all-healthy")
	}
}

// BenchmarkManagerTakeover measures, among 1,000 healthy plugins, the time
// from a newer alloc's registration until its instance is healthy and the
// old one has stopped.
func BenchmarkManagerTakeover(b *testing.B) {
	const takeovers = 200
	for range b.N {
		b.StopTimer()
		f := newFleet(b, true)
		f.start(b, func(c *manager.Config) { c.Fingerprint = benchFingerprints })
		f.awaitFleetHealth(b, true)
		b.StartTimer()
		latencies := make([]time.Duration, 0, takeovers)
		for i := range takeovers {
			name := fmt.Sprintf("p%d", i*(fleetSize/takeovers))
			old, _ := f.registry.Snapshot().Current(csi.TypeNode, name)
			start := time.Now()
			f.register(b, csi.TypeNode, name, "b", old.GetConnection().GetSocketPath())
			awaitHealth(b, f.events, nodeHealthy(name, "b"), nodeStopped(name, "a"))
			latencies = append(latencies, time.Since(start))
		}
		slices.Sort(latencies)
		b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(latencies[len(latencies)*99/100].Microseconds())/1000, "p99-ms")
	}
}

// BenchmarkInstanceMemory measures the memory the manager and its
// instances hold per plugin, 1,000 plugins in all: idle (the socket does
// not exist, so no connection) and connected (a gRPC connection to the
// in-process hostpath plugin, whose side of each connection is counted too).
func BenchmarkInstanceMemory(b *testing.B) {
	for _, served := range []bool{false, true} {
		b.Run(map[bool]string{false: "idle", true: "connected"}[served], func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				f := newFleet(b, served)
				b.StartTimer()
				before := memory()
				f.start(b, func(c *manager.Config) { c.Fingerprint = benchFingerprints })
				f.awaitFleetHealth(b, served)
				after := memory()
				b.ReportMetric(float64(after.heap-before.heap)/fleetSize, "heap-B/instance")
				if served { // an idle instance adds no goroutine: its stack figure would be noise
					b.ReportMetric(float64(after.stack-before.stack)/fleetSize, "stack-B/instance")
				}
				b.ReportMetric(float64(after.goroutines-before.goroutines)/fleetSize, "goroutines/instance")
			}
		})
	}
}

type usage struct {
	heap, stack int64
	goroutines  int
}

// memory collects garbage twice, then reads how much memory is in use.
func memory() usage {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return usage{heap: int64(m.HeapAlloc), stack: int64(m.StackInuse), goroutines: runtime.NumGoroutine()}
}

// BenchmarkFingerprintCycles measures how many fingerprints per second
// 1,000 instances get through when each fingerprints every millisecond:
// the cost of a fingerprint (Probe and NodeGetCapabilities over a unix
// socket, and the actor's round trip), with the CPU as the limit.
func BenchmarkFingerprintCycles(b *testing.B) {
	const window = 2 * time.Second
	for range b.N {
		b.StopTimer()
		f := newFleet(b, true)
		clock := &gateClock{}
		f.start(b, func(c *manager.Config) {
			c.Fingerprint = manager.FingerprintOptions{Interval: time.Millisecond, RPCTimeout: 30 * time.Second}
			c.Clock = clock
		})
		f.awaitFleetHealth(b, true)
		b.StartTimer()
		clock.open()
		before := f.probes.Load()
		time.Sleep(window)
		cycles := f.probes.Load() - before
		b.ReportMetric(float64(cycles)/window.Seconds(), "fingerprints/s")
	}
}

// gateClock holds back every timer set before open and fires them all at
// open; from then on it is the real clock. It lets a benchmark start many
// instances before their timers compete for the CPU.
type gateClock struct {
	mu     sync.Mutex
	opened bool
	held   []*heldTimer
}

// heldTimer is a timer set before open.
type heldTimer struct {
	f    func()
	done atomic.Bool // fired or stopped
}

func (t *heldTimer) Stop() bool { return t.done.CompareAndSwap(false, true) }

func (c *gateClock) Now() time.Time { return time.Now() }

func (c *gateClock) AfterFunc(d time.Duration, f func()) supervisor.Stopper {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.opened {
		return time.AfterFunc(d, f)
	}
	t := &heldTimer{f: f}
	c.held = append(c.held, t)
	return t
}

func (c *gateClock) open() {
	c.mu.Lock()
	c.opened = true
	held := c.held
	c.held = nil
	c.mu.Unlock()
	for _, t := range held {
		if t.Stop() {
			t.f()
		}
	}
}
