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
			b.ReportMetric(float64(b.N)/float64(s.Commits()), "ops/commit")
		})
	}
}

// BenchmarkBoltOpen measures OpenBolt on a file of 4,000 records of 16 KB
// (about 80 MB), and the part of it that checks every page's bounds
// (checkPages) before bbolt reads them, to weigh that check against the
// whole open: the records' checksums and bbolt's own consistency check.
func BenchmarkBoltOpen(b *testing.B) {
	path := filepath.Join(b.TempDir(), "state.db")
	s, err := storage.OpenBolt(path, storage.BoltOptions{NoSync: true})
	require.NoError(b, err)
	bucket, err := s.Bucket("registry")
	require.NoError(b, err)
	value := make([]byte, 16<<10)
	for batch := range 40 {
		ops := make([]storage.Op, 0, 100)
		for i := range cap(ops) {
			ops = append(ops, storage.Put(fmt.Appendf(nil, "key-%06d", batch*100+i), value))
		}
		require.NoError(b, bucket.Apply(ops))
	}
	require.NoError(b, s.Close())
	b.Run("whole open", func(b *testing.B) {
		for b.Loop() {
			s, err := storage.OpenBolt(path, storage.BoltOptions{})
			require.NoError(b, err)
			require.NoError(b, s.Close())
		}
	})
	b.Run("page check alone", func(b *testing.B) {
		for b.Loop() {
			require.NoError(b, storage.CheckPages(path))
		}
	})
}
