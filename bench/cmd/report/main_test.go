package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const sample = `goos: linux
cpu: AMD EPYC
BenchmarkConcurrentRegistrants/registrants=8,subscribers=8/nomad-2   	  38324	      5577 ns/op	    100 ops/s	     240 B/op	       7 allocs/op
BenchmarkConcurrentRegistrants/registrants=8,subscribers=8/nomad-2   	  38324	      5577 ns/op	    300 ops/s	     240 B/op	       7 allocs/op
BenchmarkConcurrentRegistrants/registrants=8,subscribers=8/nomad-2   	  38324	      5577 ns/op	    200 ops/s	     240 B/op	       7 allocs/op
BenchmarkConcurrentRegistrants/registrants=8,subscribers=8/plugvisor-2   	  38324	      5577 ns/op	    400 ops/s
BenchmarkDeliveryLatency/plugvisor-2    4107	     52792 ns/op	        13.74 p50-µs	        87.91 p99-µs	      1754 p99.9-µs
--- FAIL: something else
PASS
`

func TestParseTakesTheMedianOfEachFigure(t *testing.T) {
	r := newResults()
	require.NoError(t, r.parse(strings.NewReader(sample)))
	got, ok := r.get("BenchmarkConcurrentRegistrants/registrants=8,subscribers=8/nomad", "ops/s")
	require.True(t, ok)
	require.Equal(t, 200.0, got)
	got, ok = r.get("BenchmarkDeliveryLatency/plugvisor", "p99-µs")
	require.True(t, ok)
	require.Equal(t, 87.91, got)
	require.Equal(t, "AMD EPYC", r.cpu)
}

func TestTheTableSaysWhichTargetsAreMet(t *testing.T) {
	r := newResults()
	require.NoError(t, r.parse(strings.NewReader(sample)))
	section := render(r, "make bench-compare", "a machine", time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC))
	require.Contains(t, section, "| 8 concurrent registrants, 8 draining subscribers | pairs/s | 200 | 400 | 2× |")
	require.Contains(t, section, "**met** (2.00×)")
	require.Contains(t, section, "**met** (88 µs)")
	require.Contains(t, section, "**TODO: pending")
	require.True(t, strings.HasPrefix(section, startMarker))
	require.True(t, strings.HasSuffix(section, endMarker+"\n"))
}

func TestSpliceReplacesOnlyTheGeneratedSection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	require.NoError(t, splice(path, startMarker+"\none\n"+endMarker+"\n"))
	created, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "# Benchmarks\n\n"+startMarker+"\none\n"+endMarker+"\n", string(created))

	require.NoError(t, os.WriteFile(path, []byte("before\n"+startMarker+"\nold\n"+endMarker+"\nafter\n"), 0o644))
	require.NoError(t, splice(path, startMarker+"\nnew\n"+endMarker+"\n"))
	replaced, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "before\n"+startMarker+"\nnew\n"+endMarker+"\nafter\n", string(replaced))

	require.NoError(t, os.WriteFile(path, []byte("hand-written\n"), 0o644))
	require.NoError(t, splice(path, startMarker+"\nnew\n"+endMarker+"\n"))
	appended, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "hand-written\n\n"+startMarker+"\nnew\n"+endMarker+"\n", string(appended))

	require.NoError(t, os.WriteFile(path, []byte("broken\n"+endMarker+"\n"), 0o644))
	require.Error(t, splice(path, startMarker+"\nnew\n"+endMarker+"\n"))
}
