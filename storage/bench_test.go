package storage_test

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/storage"
)

// BenchmarkBoltApply measures durable (fsync'd) Apply calls of one 128-byte
// record each, from 1 writer and from 32 concurrent writers (on one bucket, or
// one bucket each). b.N is the total number of Apply calls. It reports ops/s
// and ops/commit: how many Apply calls shared each fsync'd commit.
func BenchmarkBoltApply(b *testing.B) {
	for _, c := range []struct{ writers, buckets int }{{1, 1}, {32, 1}, {32, 32}} {
		b.Run(fmt.Sprintf("writers=%d/buckets=%d", c.writers, c.buckets), func(b *testing.B) {
			s, err := storage.OpenBolt(filepath.Join(b.TempDir(), "state.db"), storage.BoltOptions{})
			require.NoError(b, err)
			defer func() { require.NoError(b, s.Close()) }()
			buckets := make([]storage.Bucket, c.buckets)
			for i := range buckets {
				buckets[i], err = s.Bucket(fmt.Sprintf("owner-%02d", i))
				require.NoError(b, err)
			}
			value := make([]byte, 128)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for w := range c.writers {
				wg.Go(func() {
					bucket := buckets[w%c.buckets]
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						key := fmt.Appendf(nil, "key-%09d", i)
						if err := bucket.Apply([]storage.Op{storage.Put(key, value)}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			b.ReportMetric(float64(b.N)/float64(storage.CommitCount(s)), "ops/commit")
		})
	}
}
