package workload

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// The workloads below run on a target that Populate has filled, so that
// the same registry of many plugins serves every run of a benchmark: a
// fresh one per run would register 100,000 plugins each time.

// Populate registers plugins plugins, p0 to p(plugins-1), one allocation
// (a0) each.
func Populate(t Target, plugins int) error {
	for i := range plugins {
		if err := t.Register(fmt.Sprint("p", i), "a0"); err != nil {
			return err
		}
	}
	return nil
}

// stride spreads the plugins a workload touches over the whole registry,
// so that consecutive iterations touch unrelated parts of it (a prime, so
// that every plugin comes up).
const stride = 7919

// ReadAfterWrite runs on a target that Populate filled with plugins
// plugins. Each iteration writes once, a register and deregister of a new
// allocation of one of the plugins, then reads once: DispensePlugin of
// another plugin, or ListPlugins. The read is timed on its own: it reports
// the mean and the median of the reads in µs ("read-µs", "read-p50-µs"),
// and for ListPlugins the mean per plugin listed ("read-ns/plugin"). ns/op
// and "cpu-µs/op" cover the write and the read together.
func ReadAfterWrite(b *testing.B, t Target, plugins int, dispense bool) {
	reads := writeThenRead(b, t, plugins, func(i int) bool {
		if dispense {
			return ok(b, t.Dispense(fmt.Sprint("p", (i*stride+plugins/2)%plugins)))
		}
		if n := t.List(); n != plugins {
			b.Errorf("listed %d plugins, want %d", n, plugins)
			return false
		}
		return true
	})
	if len(reads) == 0 {
		return
	}
	var sum time.Duration
	for _, d := range reads {
		sum += d
	}
	mean := float64(sum.Nanoseconds()) / float64(len(reads))
	slices.Sort(reads)
	b.ReportMetric(mean/1e3, "read-µs")
	b.ReportMetric(float64(reads[len(reads)/2].Nanoseconds())/1e3, "read-p50-µs")
	if !dispense {
		b.ReportMetric(mean/float64(plugins), "read-ns/plugin")
	}
}

// PairAmong runs on a target that Populate filled with plugins plugins.
// Each iteration registers and deregisters a new allocation of one of
// them, a different one each time, and it reports the CPU time per pair.
func PairAmong(b *testing.B, t Target, plugins int) {
	writeThenRead(b, t, plugins, nil)
}

// writeThenRead runs b.N iterations, each a register and deregister of
// allocation n<i> of a plugin (a different one each time), then read(i)
// if there is one, timed on its own. It reports the CPU time per
// iteration and returns the reads' times, none if one failed.
func writeThenRead(b *testing.B, t Target, plugins int, read func(i int) bool) []time.Duration {
	reads := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	m := startMeter(t)
	for i := range b.N {
		name, alloc := fmt.Sprint("p", i*stride%plugins), fmt.Sprint("n", i)
		if !ok(b, t.Register(name, alloc)) || !ok(b, t.Deregister(name, alloc)) {
			return nil
		}
		if read == nil {
			continue
		}
		start := time.Now()
		if !read(i) {
			return nil
		}
		reads = append(reads, time.Since(start))
	}
	b.StopTimer()
	m.report(b, b.N)
	return reads
}

// Replacements runs on a target that Populate filled: each iteration
// registers a new allocation of one of the plugins and deregisters the one
// it replaces, as a job's new allocation takes over from its old one. The
// registry keeps every change, where PairAmong's pair leaves it as it was.
// One Replacements serves every run on one target: it remembers each
// plugin's allocation.
type Replacements struct {
	held []string // the allocation of each plugin
	next int
}

// NewReplacements returns the replacements of a target that Populate
// filled with plugins plugins.
func NewReplacements(plugins int) *Replacements {
	held := make([]string, plugins)
	for i := range held {
		held[i] = "a0"
	}
	return &Replacements{held: held}
}

// Run runs b.N replacements on t and reports the CPU time of one.
func (r *Replacements) Run(b *testing.B, t Target) {
	b.ReportAllocs()
	b.ResetTimer()
	m := startMeter(t)
	for range b.N {
		r.next++
		k := r.next * stride % len(r.held)
		name, alloc := fmt.Sprint("p", k), fmt.Sprint("r", r.next)
		if !ok(b, t.Register(name, alloc)) || !ok(b, t.Deregister(name, r.held[k])) {
			return
		}
		r.held[k] = alloc
	}
	b.StopTimer()
	m.report(b, b.N)
}
