package registry_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/registry/workload"
	"github.com/plugvisor/plugvisor/storage"
)

func benchTarget(b *testing.B, bucket storage.Bucket) workload.Target {
	b.Helper()
	system := probe.NewSystem(b)
	counter := &workload.BatchCounter{}
	r, err := registry.New(system, registry.Config{
		Bucket:     bucket,
		Metrics:    counter,
		Dispensers: map[string]registry.Dispenser{workload.PluginType: func(*messages.PluginInfo) (any, error) { return nil, nil }},
	})
	require.NoError(b, err)
	b.Cleanup(func() { _ = r.Shutdown() })
	return workload.PlugvisorCounting(system, r, counter)
}

func channelTarget(b *testing.B) workload.Target {
	b.Helper()
	system := probe.NewSystem(b)
	counter := &workload.BatchCounter{}
	bucket, err := storage.NewMemory().Bucket(registry.BucketName)
	require.NoError(b, err)
	r, err := registry.New(system, registry.Config{Bucket: bucket, Metrics: counter})
	require.NoError(b, err)
	b.Cleanup(func() { _ = r.Shutdown() })
	return workload.PlugvisorChannels(system, r, counter)
}

func memoryTarget(b *testing.B) workload.Target {
	bucket, err := storage.NewMemory().Bucket(registry.BucketName)
	require.NoError(b, err)
	return benchTarget(b, bucket)
}

func BenchmarkRegisterDeregister(b *testing.B) {
	for _, subs := range []int{1, 8} {
		b.Run(fmt.Sprintf("subscribers=%d", subs), func(b *testing.B) {
			workload.RegisterDeregister(b, memoryTarget(b), subs)
		})
	}
}

// BenchmarkConcurrentRegistrants: 8 registrants, 8 subscribers that are
// actors taking batches, then 8 that are Go channels (Subscribe).
func BenchmarkConcurrentRegistrants(b *testing.B) {
	b.Run("subscribers=actors", func(b *testing.B) { workload.ConcurrentRegistrants(b, memoryTarget(b), 8, 8) })
	b.Run("subscribers=channels", func(b *testing.B) {
		workload.ConcurrentRegistrants(b, channelTarget(b), 8, 8)
	})
}

func BenchmarkDeliveryLatency(b *testing.B) {
	workload.DeliveryLatency(b, memoryTarget(b))
}

func BenchmarkReadsUnderWrites(b *testing.B) {
	b.Run("ListPlugins", func(b *testing.B) { workload.ReadsUnderWrites(b, memoryTarget(b), 100, false, 2000) })
	b.Run("DispensePlugin", func(b *testing.B) { workload.ReadsUnderWrites(b, memoryTarget(b), 100, true, 2000) })
}

func BenchmarkRegisterWithOldAllocs(b *testing.B) {
	for _, old := range []int{0, 10000} {
		b.Run(fmt.Sprintf("old=%d", old), func(b *testing.B) {
			workload.OldAllocs(b, memoryTarget(b), old)
		})
	}
}

func BenchmarkDurableWrites(b *testing.B) {
	for _, writers := range []int{1, 32} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			db, err := storage.OpenBolt(filepath.Join(b.TempDir(), "state.db"), storage.BoltOptions{})
			require.NoError(b, err)
			b.Cleanup(func() { _ = db.Close() })
			bucket, err := db.Bucket(registry.BucketName)
			require.NoError(b, err)
			workload.ConcurrentRegistrants(b, benchTarget(b, bucket), writers, 0)
		})
	}
}
