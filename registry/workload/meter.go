package workload

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/plugvisor/plugvisor/internal/cputime"
	"github.com/plugvisor/plugvisor/registry"
)

// Batcher is a Target that writes in batches and counts them.
type Batcher interface {
	// Batches returns how many batches went to the store so far, and how
	// many writes they held.
	Batches() (batches, writes int64)
}

// BatchCounter is a registry.Metrics that counts batches and their writes.
// Give it to registry.Config.Metrics and to PlugvisorCounting.
type BatchCounter struct {
	batches, writes atomic.Int64
}

var _ registry.Metrics = (*BatchCounter)(nil)

// Batch counts one batch of writes.
func (c *BatchCounter) Batch(writes int) { c.batches.Add(1); c.writes.Add(int64(writes)) }

// Write does nothing: only batches are counted.
func (c *BatchCounter) Write(string, error, time.Duration) {}

// EventsSent does nothing.
func (c *BatchCounter) EventsSent(int) {}

// Subscribers does nothing.
func (c *BatchCounter) Subscribers(int) {}

// Batches returns the batches and writes counted so far.
func (c *BatchCounter) Batches() (batches, writes int64) { return c.batches.Load(), c.writes.Load() }

// meter measures what the timed part of a workload cost the whole process:
// its CPU time (user and system, every goroutine's, the garbage collector
// included), and the writes per batch of a Batcher.
type meter struct {
	target           Target
	cpu              time.Duration
	batches, written int64
}

func startMeter(t Target) meter {
	m := meter{target: t, cpu: cputime.Used()}
	if b, ok := t.(Batcher); ok {
		m.batches, m.written = b.Batches()
	}
	return m
}

// report reports the CPU time per operation (ops of them since start) in
// µs, and the writes per batch.
func (m meter) report(b *testing.B, ops int) {
	if ops > 0 {
		b.ReportMetric(float64((cputime.Used()-m.cpu).Nanoseconds())/1e3/float64(ops), "cpu-µs/op")
	}
	if bt, ok := m.target.(Batcher); ok {
		batches, written := bt.Batches()
		if batches > m.batches {
			b.ReportMetric(float64(written-m.written)/float64(batches-m.batches), "writes/batch")
		}
	}
}
