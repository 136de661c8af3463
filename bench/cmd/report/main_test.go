package main

import (
	"fmt"
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
BenchmarkConcurrentRegistrants/registrants=8,subscribers=8/plugvisor-2   	  38324	      5577 ns/op	    400 ops/s	 12 cpu-µs/op	 4.5 writes/batch
BenchmarkConcurrentRegistrants/registrants=8,subscribers=8/nomad-2   	  38324	      5577 ns/op	    200 ops/s	 5 cpu-µs/op
BenchmarkStuckSubscriber/draining=7/plugvisor-2 	 1	 1000 ns/op	 9000 free-ops/s	 8600 stuck-ops/s	 95.5 stuck-%
BenchmarkDeliveryLatency/nomad-2    4107	     5279 ns/op	        0.6 p50-µs	        40 p99-µs	      50 p99.9-µs
BenchmarkDeliveryLatency/plugvisor-2    4107	     52792 ns/op	        13.74 p50-µs	        87.91 p99-µs	      1754 p99.9-µs
BenchmarkCSIMemoryPerPlugin/plugins=10000/idle-2         	       1	 742696127 ns/op	      2982 B/plugin	         0 goroutines/plugin	      2962 heap-B/plugin	       309.4 list-µs	       240.6 ms-until-current	     10000 plugins	      6253 resync-µs	        19.66 stack-B/plugin
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

// table parses benchmark output and renders its section.
func table(t *testing.T, output string) (*results, string) {
	t.Helper()
	r := newResults()
	require.NoError(t, r.parse(strings.NewReader(output)))
	return r, render(r, "make bench-compare", "a machine", time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC))
}

func TestTheTableSaysWhichTargetsAreMet(t *testing.T) {
	_, section := table(t, sample)
	// Without round markers a benchmark's n-th run is round n: plugvisor's
	// one run is held to Nomad's first.
	require.Contains(t, section, "| 8 concurrent registrants, 8 draining subscribers | pairs/s | 200 | 400 | 4× |")
	require.Contains(t, section, "**met** (4.00×)")
	require.Contains(t, section, "**not met** (2.20×)", "p99 must be at most twice Nomad's")
	require.Contains(t, section, "| CSI: manager + instance actor memory per plugin, 10,000 plugins, idle (registered, socket missing: no connection) | B/plugin (lower is better) | — | 2,982 | — |")
	require.Contains(t, section, "| CSI: resync at 10,000 plugins, nothing to correct, idle fleet | µs (lower is better) | — | 6,253 | — |")
	require.Contains(t, section, "| … CPU time per pair (whole process: callers, registry, subscribers, GC) | µs (lower is better) | 5.00 | 12.0 | 2.4× |")
	require.Contains(t, section, "**not met** (2.40×)", "CPU per pair must be at most Nomad's")
	require.Contains(t, section, "**not met** (1754 µs)", "p99.9 must be under 500 µs")
	require.Contains(t, section, "| … plugvisor's writes per store batch (group commit) | writes/batch | no batches | 4.50 |")
	require.Contains(t, section, "**met** (96%)")
	require.NotContains(t, section, "TODO")
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

func TestTheCSIRowsSayWhenTheConnectedFleetWasSmaller(t *testing.T) {
	_, section := table(t, "BenchmarkCSIMemoryPerPlugin/plugins=10000/connected-2 1 100 ns/op 43219 B/plugin 8371 ms-until-current 1000 plugins\n")
	require.Contains(t, section, "| … connected to a real gRPC server (in other processes: their memory not counted) (measured at 1,000 plugins, not 10,000: the open-file limit allowed no more) | B/plugin (lower is better) | — | 43,219 |")
}

func TestTheCSIRowsSayWhenAFleetWasCutShortForTime(t *testing.T) {
	_, section := table(t, "BenchmarkCSIMemoryPerPlugin/plugins=10000/idle-2 1 100 ns/op 3000 B/plugin 800 ms-until-current 1000 plugins 1 cut-short\n")
	require.Contains(t, section, "(measured at 1,000 plugins, not 10,000: 10,000 were not all current within the benchmark's 40 s wait on the loaded machine) | B/plugin (lower is better) | — | 3,000 |")
}

func TestAFleetMeasuredAtTwoSizesCountsOnlyItsLargest(t *testing.T) {
	r, section := table(t, "BenchmarkCSIMemoryPerPlugin/plugins=10000/connected-2 1 100 ns/op 43000 B/plugin 10000 plugins\n"+
		"BenchmarkCSIMemoryPerPlugin/plugins=10000/connected-2 1 100 ns/op 41000 B/plugin 1 cut-short 1000 plugins\n")
	got, ok := r.get("BenchmarkCSIMemoryPerPlugin/plugins=10000/connected", "B/plugin")
	require.True(t, ok)
	require.Equal(t, 43000.0, got, "the round cut short to 1,000 plugins is left out")
	require.Contains(t, section, "| … connected to a real gRPC server (in other processes: their memory not counted) | B/plugin (lower is better) | — | 43,000 |")
}

func TestTheChannelSubscribersAreHeldToTheActorSubscribersOfTheSameRun(t *testing.T) {
	const cr = "BenchmarkConcurrentRegistrants/registrants=8,subscribers=8/"
	for _, tc := range []struct {
		channelCPU string
		want       string
	}{
		{"14", "**met** (1.17× the actors')"},
		{"18", "**not met** (1.50× the actors')"},
	} {
		_, section := table(t, cr+"nomad-2 	 100	 5577 ns/op	 200 ops/s	 5 cpu-µs/op\n"+
			cr+"plugvisor-2 	 100	 5577 ns/op	 400 ops/s	 12 cpu-µs/op\n"+
			cr+"plugvisor-channel-2 	 100	 5577 ns/op	 300 ops/s	 "+tc.channelCPU+" cpu-µs/op\n")
		require.Contains(t, section, "| … the same with plugvisor's subscribers as Go channels (Subscribe), as Nomad's are | pairs/s | 200 | 300 | 1.5× |")
		require.Contains(t, section, "| … its CPU time per pair (whole process) | µs (lower is better) | 5.00 | "+tc.channelCPU+".0 |")
		require.Contains(t, section, tc.want)
	}
}

// TestTargetsJudgeTheMedianOfThePerRoundRatios: three rounds whose
// ratio of medians (100 / 100) would meet ≥ 1.0×, while the median of
// the rounds' own ratios (2×, 0.25×, 0.9×) does not.
func TestTargetsJudgeTheMedianOfThePerRoundRatios(t *testing.T) {
	const cr = "BenchmarkConcurrentRegistrants/registrants=8,subscribers=8/"
	var out strings.Builder
	for i, pair := range [][2]string{{"100", "200"}, {"400", "100"}, {"100", "90"}} {
		fmt.Fprintf(&out, "bench-compare: round %d, load average %d.0 2.0 3.0\n", i+1, i+1)
		fmt.Fprintf(&out, "%snomad-2 100 5577 ns/op %s ops/s\n%splugvisor-2 100 5577 ns/op %s ops/s\n", cr, pair[0], cr, pair[1])
	}
	r, section := table(t, out.String())
	require.Equal(t, []int{1, 2, 3}, r.roundNumbers())
	require.Contains(t, section, "| 8 concurrent registrants, 8 draining subscribers | pairs/s | 100 | 100 | 0.9× (0.25×–2×) |")
	require.Contains(t, section, "**not met** (0.90×)")
	require.Contains(t, section, "round 1: 1.0 2.0 3.0; round 2: 2.0 2.0 3.0; round 3: 3.0 2.0 3.0")
}

func TestARoundMissingOneSideHasNoRatio(t *testing.T) {
	const cr = "BenchmarkConcurrentRegistrants/registrants=8,subscribers=8/"
	_, section := table(t, "bench-compare: round 1, load average 1 1 1\n"+cr+"nomad-2 1 1 ns/op 100 ops/s\n"+
		"bench-compare: round 2, load average 1 1 1\n"+cr+"plugvisor-2 1 1 ns/op 300 ops/s\n")
	require.Contains(t, section, "| 8 concurrent registrants, 8 draining subscribers | pairs/s | 100 | 300 | — |")
	require.Contains(t, section, "| ≥ 1.0× Nomad (stretch 1.5×) | no figure |")
}
