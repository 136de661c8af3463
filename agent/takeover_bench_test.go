package agent_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/internal/cputime"
)

// BenchmarkTakeoverThenMount: b.N takeovers of a node plugin served all
// along (startTakeover: the old allocation's socket and the new one's, one
// driver behind both), each followed at once by a mount of a volume and
// its unmount. It reports the mounts refused as not schedulable (the
// target is none), the time from the register call to the mount's
// answer, served through the new allocation's socket (p50 and p99, ms),
// and the process's CPU time per takeover. Between takeovers it waits,
// untimed, for the new instance's healthy fingerprint. Run it with
// -benchtime 1000x.
func BenchmarkTakeoverThenMount(b *testing.B) {
	f := startTakeover(b)
	ctx := context.Background()
	took := make([]time.Duration, 0, b.N)
	refused, cpu := 0, time.Duration(0)
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		alloc, web := fmt.Sprint("a", i), fmt.Sprint("web-", i)
		before, start := cputime.Used(), time.Now()
		require.NoError(b, f.register(csi.TypeNode, alloc, f.sockets[i%2]))
		_, err := f.a.Volumes().Mount(ctx, f.vol.Namespace, f.vol.ID, web, false)
		took = append(took, time.Since(start))
		switch {
		case errors.Is(err, volumes.ErrClaimRefused):
			refused++
		case err != nil:
			b.Fatalf("takeover %d: %v", i, err)
		default:
			require.NoError(b, f.a.Volumes().Unmount(ctx, f.vol.Namespace, f.vol.ID, web))
		}
		cpu += cputime.Used() - before
		b.StopTimer()
		f.awaitHealthy(b, alloc)
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(refused), "refused")
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1e3, "register-to-mount-p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1e3, "register-to-mount-p99-ms")
	b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/takeover")
}
