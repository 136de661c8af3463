package bench_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/plugvisor/plugvisor/registry/workload"
	"github.com/plugvisor/plugvisor/storage"
)

// The comparisons: every workload of registry/workload, run against
// Nomad's registry and plugvisor's in one process. Sub-benchmark names end
// in /nomad or /plugvisor; cmd/report pairs them up.

func BenchmarkRegisterDeregister(b *testing.B) {
	for _, subs := range []int{1, 8} {
		b.Run(fmt.Sprintf("subscribers=%d", subs), func(b *testing.B) {
			each(b, func(b *testing.B, im impl) { workload.RegisterDeregister(b, im.memory(b), subs) })
		})
	}
}

// BenchmarkConcurrentRegistrants: Nomad's subscribers are channels
// (PluginsUpdatedCh); plugvisor's are actors taking batches, then, in
// plugvisor-channel, channels (Subscribe) as Nomad's are, and in
// plugvisor-bucket actors again, with the registry on a storage.Memory
// bucket (Config.Bucket: each batch encoded and committed by the store's
// goroutine, as on bbolt, without the disk) instead of Config.Memory.
func BenchmarkConcurrentRegistrants(b *testing.B) {
	b.Run("registrants=8,subscribers=8", func(b *testing.B) {
		each(b, func(b *testing.B, im impl) { workload.ConcurrentRegistrants(b, im.memory(b), 8, 8) })
		b.Run("plugvisor-channel", func(b *testing.B) { workload.ConcurrentRegistrants(b, plugvisorChannels(b), 8, 8) })
		b.Run("plugvisor-bucket", func(b *testing.B) { workload.ConcurrentRegistrants(b, plugvisorBucket(b), 8, 8) })
	})
}

// BenchmarkDeliveryLatency: from a register call to its event at a
// subscriber: Nomad's a channel, plugvisor's an actor taking batches, and
// in plugvisor-channel a channel (Subscribe), as Nomad's is.
func BenchmarkDeliveryLatency(b *testing.B) {
	each(b, func(b *testing.B, im impl) { workload.DeliveryLatency(b, im.memory(b)) })
	b.Run("plugvisor-channel", func(b *testing.B) { workload.DeliveryLatency(b, plugvisorChannels(b)) })
}

// BenchmarkReadsUnderWrites: parallel readers while one writer registers
// and deregisters at the same pace on both sides (writerPace), the
// writer's store in memory, then in a bbolt file with fsync (Nomad's
// client persists under the lock its readers take).
func BenchmarkReadsUnderWrites(b *testing.B) {
	const plugins = 100
	for _, read := range []string{"ListPlugins", "DispensePlugin"} {
		for _, store := range []string{"memory", "durable"} {
			b.Run(read+"/writer="+store, func(b *testing.B) {
				each(b, func(b *testing.B, im impl) {
					target := im.memory
					if store == "durable" {
						target = im.durable
					}
					workload.ReadsUnderWrites(b, target(b), plugins, read == "DispensePlugin", writerPace[store])
				})
			})
		}
	}
}

// writerPace is the writer's pairs per second in BenchmarkReadsUnderWrites,
// by store: below what either side's writer manages alone on 2 busy cores,
// so that both do the same work.
var writerPace = map[string]int{"memory": 2000, "durable": 50}

func BenchmarkOldAllocs(b *testing.B) {
	for _, old := range []int{0, 10000} {
		b.Run(fmt.Sprintf("old=%d", old), func(b *testing.B) {
			each(b, func(b *testing.B, im impl) { workload.OldAllocs(b, im.memory(b), old) })
		})
	}
}

// BenchmarkDurableWrites: writers goroutines register and deregister, each
// write durable (fsync) before it returns; no subscribers.
func BenchmarkDurableWrites(b *testing.B) {
	for _, writers := range []int{1, 32} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			each(b, func(b *testing.B, im impl) { workload.ConcurrentRegistrants(b, im.durable(b), writers, 0) })
		})
	}
}

// The benchmarks below do a fixed amount of work whatever b.N is: run them
// with -benchtime=1x (make bench-compare runs them in a test process of
// their own, apart from the others).

const (
	// stuckWindow is how long each window of the stuck-subscriber
	// benchmark registers.
	stuckWindow = time.Second
	// stuckRounds is how many windows of each kind it interleaves.
	stuckRounds = 5
)

// BenchmarkStuckSubscriber: register+deregister from one goroutine over
// fixed windows with 7 draining subscribers, alternately without and with
// one more that never reads (8 in all), stuckRounds of each. Nomad stalls:
// its figure is the operations that completed before the stall, divided
// by the window; the calls still blocked when a window ends are abandoned,
// and released.
func BenchmarkStuckSubscriber(b *testing.B) {
	b.Run("draining=7", func(b *testing.B) {
		each(b, func(b *testing.B, im impl) { workload.StuckSubscriber(b, im.memory, 7, stuckRounds, stuckWindow) })
	})
}

// BenchmarkMemoryPerPlugin: heap held per plugin once 10,000 plugins are
// registered (one allocation each).
// plugvisor's in-memory store keeps an encoded copy of every record on the
// heap; "plugvisor-registry" discards the records, to show the registry's
// own share (in the agent the records live in bbolt's memory map).
func BenchmarkMemoryPerPlugin(b *testing.B) {
	b.Run("plugins=10000", func(b *testing.B) {
		each(b, func(b *testing.B, im impl) { workload.MemoryPerPlugin(b, im.memory(b), 10000) })
		b.Run("plugvisor-registry", func(b *testing.B) {
			workload.MemoryPerPlugin(b, workload.Plugvisor(newPlugvisor(b, discard{})), 10000)
		})
	})
}

// discard is a storage.Bucket that keeps nothing.
type discard struct{}

func (discard) Load(func(key, value []byte) error) error { return nil }
func (discard) Apply([]storage.Op) error                 { return nil }
