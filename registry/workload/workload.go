// Package workload holds the registry benchmarks' workloads, written
// against a small Target interface so the same workload can run against
// plugvisor's registry and against another implementation (Nomad's, in the
// separate bench module) in one run.
package workload

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// PluginType is the plugin type every workload registers.
const PluginType = "csi-node"

// Target is a registry reduced to what the workloads use.
type Target interface {
	// Register adds allocation allocID of plugin name, with a socket path.
	Register(name, allocID string) error
	// Deregister removes allocation allocID of plugin name.
	Deregister(name, allocID string) error
	// List returns how many plugins of PluginType are current.
	List() int
	// Dispense looks up the current allocation of name.
	Dispense(name string) error
	// Subscribe starts a subscriber to PluginType that calls got for every
	// event, in order, until stop is called.
	Subscribe(got func()) (stop func())
	// SubscribeStuck starts a subscriber that never reads; release lets
	// it go.
	SubscribeStuck() (release func())
}

// SocketPath is the socket path workloads give allocation allocID.
func SocketPath(allocID string) string { return "/run/plugvisor/" + allocID + "/csi.sock" }

// RegisterDeregister registers and deregisters one allocation per
// iteration, with subscribers draining events.
func RegisterDeregister(b *testing.B, t Target, subscribers int) {
	for range subscribers {
		b.Cleanup(t.Subscribe(func() {}))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		alloc := fmt.Sprint("a", i)
		if !ok(b, t.Register("p", alloc)) || !ok(b, t.Deregister("p", alloc)) {
			return
		}
	}
}

// ConcurrentRegistrants runs registrants goroutines, each registering then
// deregistering allocations of its own plugin, with subscribers draining.
// It reports operations per second.
func ConcurrentRegistrants(b *testing.B, t Target, registrants, subscribers int) {
	for range subscribers {
		b.Cleanup(t.Subscribe(func() {}))
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for g := range registrants {
		wg.Go(func() {
			name := fmt.Sprint("p", g)
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				alloc := fmt.Sprint("a", i)
				if !ok(b, t.Register(name, alloc)) || !ok(b, t.Deregister(name, alloc)) {
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
}

// DeliveryLatency measures the time from calling Register to the event
// reaching a subscriber, and reports p50, p99 and p99.9 in microseconds.
func DeliveryLatency(b *testing.B, t Target) {
	arrived := make(chan time.Time, 1)
	b.Cleanup(t.Subscribe(func() {
		select {
		case arrived <- time.Now():
		default:
		}
	}))
	latencies := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		alloc := fmt.Sprint("a", i)
		start := time.Now()
		if !ok(b, t.Register("p", alloc)) {
			return
		}
		latencies = append(latencies, (<-arrived).Sub(start))
		if !ok(b, t.Deregister("p", alloc)) {
			return
		}
		<-arrived
	}
	b.StopTimer()
	ReportPercentiles(b, latencies)
}

// ReportPercentiles reports p50, p99 and p99.9 of latencies in µs.
func ReportPercentiles(b *testing.B, latencies []time.Duration) {
	if len(latencies) == 0 {
		return
	}
	slices.Sort(latencies)
	at := func(q float64) float64 {
		return float64(latencies[min(len(latencies)-1, int(q*float64(len(latencies))))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(at(0.50), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
	b.ReportMetric(at(0.999), "p99.9-µs")
}

// ReadsUnderWrites measures List or Dispense (per iteration, from parallel
// readers) while one writer registers and deregisters without pause over
// plugins plugins, and reports the writer's pairs per second meanwhile.
func ReadsUnderWrites(b *testing.B, t Target, plugins int, dispense bool) {
	for i := range plugins {
		if !ok(b, t.Register(fmt.Sprint("p", i), "a0")) {
			return
		}
	}
	stop := make(chan struct{})
	var writer sync.WaitGroup
	var writes atomic.Int64
	writer.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			alloc := fmt.Sprint("w", i)
			if !ok(b, t.Register("writer", alloc)) || !ok(b, t.Deregister("writer", alloc)) {
				return
			}
			writes.Add(1)
		}
	})
	b.ReportAllocs()
	b.ResetTimer()
	start, written := time.Now(), writes.Load()
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			if dispense {
				if !ok(b, t.Dispense(fmt.Sprint("p", i%plugins))) {
					return
				}
			} else if n := t.List(); n < plugins {
				b.Errorf("listed %d plugins, want at least %d", n, plugins)
				return
			}
		}
	})
	b.StopTimer()
	// What the readers left the writer: a registry whose readers block its
	// writer (or the reverse) shows it here.
	b.ReportMetric(float64(writes.Load()-written)/time.Since(start).Seconds(), "writer-pairs/s")
	close(stop)
	writer.Wait()
}

// OldAllocs registers old allocations of one plugin, then measures a
// register and deregister of a new allocation on top of them.
func OldAllocs(b *testing.B, t Target, old int) {
	for i := range old {
		if !ok(b, t.Register("p", fmt.Sprint("old", i))) {
			return
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		alloc := fmt.Sprint("new", i)
		if !ok(b, t.Register("p", alloc)) || !ok(b, t.Deregister("p", alloc)) {
			return
		}
	}
}

// StuckSubscriber measures register+deregister throughput over a fixed
// window with subscribers draining and, when stuck, one more that never
// reads. A registry that stalls reports 0 ops/s instead of hanging: calls
// still blocked when the window ends are abandoned (the caller must tear
// the target down).
func StuckSubscriber(b *testing.B, t Target, subscribers int, stuck bool, window time.Duration) {
	for range subscribers {
		b.Cleanup(t.Subscribe(func() {}))
	}
	if stuck {
		b.Cleanup(t.SubscribeStuck())
	}
	var ops atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		deadline := time.Now().Add(window)
		for i := 0; time.Now().Before(deadline); i++ {
			alloc := fmt.Sprint("a", i)
			if t.Register("p", alloc) != nil || t.Deregister("p", alloc) != nil {
				return
			}
			ops.Add(1)
		}
	}()
	select {
	case <-done:
	case <-time.After(window + time.Second):
	}
	b.ReportMetric(float64(ops.Load())/window.Seconds(), "ops/s")
}

// ok reports err to b (safe from any goroutine) and says whether it was nil.
func ok(b *testing.B, err error) bool {
	if err != nil {
		b.Error(err)
		return false
	}
	return true
}
