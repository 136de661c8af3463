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

	"github.com/plugvisor/plugvisor/csi/catalog/model"
)

// PluginType is the plugin type every workload registers.
const PluginType = model.TypeNode

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
	m := startMeter(t)
	for i := range b.N {
		alloc := fmt.Sprint("a", i)
		if !ok(b, t.Register("p", alloc)) || !ok(b, t.Deregister("p", alloc)) {
			return
		}
	}
	m.report(b, b.N)
}

// ConcurrentRegistrants runs registrants goroutines, each registering then
// deregistering allocations of its own plugin, with subscribers draining.
// It reports register+deregister pairs per second ("ops/s"), the CPU time
// of the whole process per pair, and writes per batch for a Batcher.
func ConcurrentRegistrants(b *testing.B, t Target, registrants, subscribers int) {
	for range subscribers {
		b.Cleanup(t.Subscribe(func() {}))
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	m := startMeter(t)
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
	m.report(b, b.N)
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
// readers) over plugins plugins while one writer registers and deregisters
// at pace pairs per second, the same work for every target, and reports
// the pairs per second the writer managed meanwhile: a registry whose
// readers hold up its writer (or the reverse) shows it there.
func ReadsUnderWrites(b *testing.B, t Target, plugins int, dispense bool, pace int) {
	for i := range plugins {
		if !ok(b, t.Register(fmt.Sprint("p", i), "a0")) {
			return
		}
	}
	stop := make(chan struct{})
	var writer sync.WaitGroup
	var writes atomic.Int64
	writer.Go(func() {
		start, every := time.Now(), time.Second/time.Duration(pace)
		for i := 0; ; i++ {
			// Catch up without sleeping when behind; otherwise wait for
			// the pair's slot.
			if wait := time.Until(start.Add(time.Duration(i) * every)); wait > 0 {
				select {
				case <-stop:
					return
				case <-time.After(wait):
				}
			}
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
	m := startMeter(t)
	for i := range b.N {
		alloc := fmt.Sprint("new", i)
		if !ok(b, t.Register("p", alloc)) || !ok(b, t.Deregister("p", alloc)) {
			return
		}
	}
	m.report(b, b.N)
}

// StuckSubscriber measures register+deregister throughput with subscribers
// draining, over fixed windows that alternate without and with one more
// subscriber that never reads, rounds of each, each window on a fresh
// target from newTarget (a stalled registry stays stalled). Interleaving
// keeps a noisy machine's swings out of the comparison. It reports the
// median pairs per second of each kind of window ("free-ops/s",
// "stuck-ops/s") and the median over the rounds of the round's stuck
// figure as a percentage of its free one ("stuck-%"). A registry that
// stalls scores 0 instead of hanging: calls still blocked when a window
// ends are abandoned, and the stuck subscriber is released.
func StuckSubscriber(b *testing.B, newTarget func(*testing.B) Target, subscribers, rounds int, window time.Duration) {
	var free, stuck, share []float64
	for range rounds {
		f := stuckWindow(newTarget(b), subscribers, false, window)
		s := stuckWindow(newTarget(b), subscribers, true, window)
		free, stuck = append(free, f), append(stuck, s)
		if f > 0 {
			share = append(share, 100*s/f)
		}
	}
	b.ReportMetric(median(free), "free-ops/s")
	b.ReportMetric(median(stuck), "stuck-ops/s")
	b.ReportMetric(median(share), "stuck-%")
}

// stuckWindow runs one window of StuckSubscriber and returns its pairs per
// second.
func stuckWindow(t Target, subscribers int, stuck bool, window time.Duration) float64 {
	var stops []func()
	defer func() {
		for _, stop := range slices.Backward(stops) {
			stop()
		}
	}()
	for range subscribers {
		stops = append(stops, t.Subscribe(func() {}))
	}
	if stuck {
		stops = append(stops, t.SubscribeStuck())
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
	return float64(ops.Load()) / window.Seconds()
}

func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// ok reports err to b (safe from any goroutine) and says whether it was nil.
func ok(b *testing.B, err error) bool {
	if err != nil {
		b.Error(err)
		return false
	}
	return true
}
