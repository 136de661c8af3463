package agent_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/volumes"
)

// BenchmarkRestartWithMountsThenMount: an agent with 100 volumes of the
// hostpath plugin mounted restarts b.N times (each start reconciles the
// 100 mount records with the kernel and the plugin), and right after each
// start mounts one more volume, again at once whenever it is refused as
// not schedulable, then unmounts it. It reports the time from the call to
// agent.Start to that mount's answer (p50 and max, ms), the time until
// /v1/health is no longer "starting", and the mounts refused meanwhile.
// Run it with -benchtime 20x.
func BenchmarkRestartWithMountsThenMount(b *testing.B) {
	const mounted = 100
	dir := dataDir(b)
	a := startAgent(b, dir)
	plugin := serveHP(b, a, dir, "a1")
	var vols []*model.CSIVolume
	for i := range mounted + 1 {
		vols = append(vols, createNamedVolume(b, a, plugin.Endpoint, fmt.Sprint("v", i)))
	}
	ctx := context.Background()
	for i, v := range vols[:mounted] {
		_, err := a.Volumes().Mount(ctx, v.Namespace, v.ID, fmt.Sprint("web-", i), false)
		require.NoError(b, err)
	}
	extra := vols[mounted]
	defer func() {
		for i, v := range vols[:mounted] {
			require.NoError(b, a.Volumes().Unmount(ctx, v.Namespace, v.ID, fmt.Sprint("web-", i)))
		}
		require.NoError(b, a.Shutdown(ctx))
	}()

	var served, ready []time.Duration
	refused := 0
	b.ResetTimer()
	for i := range b.N {
		require.NoError(b, a.Shutdown(ctx))
		start := time.Now()
		a = startAgent(b, dir)
		health := unixClient(b, a)
		alloc := fmt.Sprint("new-", i)
		for {
			_, err := a.Volumes().Mount(ctx, extra.Namespace, extra.ID, alloc, false)
			if err == nil {
				break
			}
			require.True(b, errors.Is(err, volumes.ErrClaimRefused), "mount after restart %d: %v", i, err)
			refused++
		}
		served = append(served, time.Since(start))
		for healthOf(b, health)["status"] == "starting" {
			time.Sleep(time.Millisecond)
		}
		ready = append(ready, time.Since(start))
		b.StopTimer()
		require.NoError(b, a.Volumes().Unmount(ctx, extra.Namespace, extra.ID, alloc))
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(served)
	slices.Sort(ready)
	b.ReportMetric(float64(served[len(served)/2].Microseconds())/1e3, "start-to-mount-p50-ms")
	b.ReportMetric(float64(served[len(served)-1].Microseconds())/1e3, "start-to-mount-max-ms")
	b.ReportMetric(float64(ready[len(ready)/2].Microseconds())/1e3, "start-to-not-starting-p50-ms")
	b.ReportMetric(float64(refused)/float64(b.N), "refused/restart")
}
