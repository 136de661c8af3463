//go:build idlecpu

package fleet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/internal/cputime"
)

// idleWindow is how long each idle CPU figure is measured.
const idleWindow = 20 * time.Second

// cpuOver is the CPU this process used during window, as a percentage of
// one core.
func cpuOver(window time.Duration) float64 {
	before, start := cputime.Used(), time.Now()
	time.Sleep(window) // the measurement is the wait: nothing to synchronise with
	return 100 * (cputime.Used() - before).Seconds() / time.Since(start).Seconds()
}

// TestIdleCPU measures the idle CPU of one agent's fleet loops, etcd in
// another process, with 1,000 and 10,000 volumes, each claimed by and
// attached to the agent's node, which is up: nothing to free. Three
// figures per size, each over idleWindow, at a 1 s interval: the store
// alone (its lease), the old GC's reads (every interval, each agent read
// every volume twice: its step, then Store.Stranded; emulated with two
// Store.Stranded), and the GC and the Detacher of this change (the leader
// of the GC election). `make bench-idle` runs it.
func TestIdleCPU(t *testing.T) {
	t.Logf("| volumes | store alone | old GC reads, every 1 s | GC + Detacher, 1 s |")
	for _, n := range []int{1000, 10000} {
		srv := etcdtest.StartProcess(t)
		s := open(t, srv, "node-a", func(c *fleet.Config) { c.LeaseTTL, c.RequestTimeout = fleet.DefaultLeaseTTL, timeout })
		healthyNode(t, s)
		ctx := context.Background()
		vs := make([]*model.CSIVolume, n)
		for i := range vs {
			v := volume(fmt.Sprintf("v%05d", i), model.AccessModeSingleNodeWriter)
			v.WriteClaims = map[string]*model.Claim{"alloc": writeClaim("alloc", "node-a")}
			v.Attachments = map[string]*model.Attachment{"node-a": attached("node-a")}
			vs[i] = v
		}
		require.NoError(t, fleet.Fill(ctx, s, vs))

		alone := cpuOver(idleWindow)

		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					for range 2 {
						if _, err := s.Stranded(ctx); err != nil {
							t.Error(err)
						}
					}
				}
			}
		}()
		old := cpuOver(idleWindow)
		close(stop)
		<-done

		gc, err := fleet.StartGC(s, fleet.GCConfig{Interval: time.Second, Grace: time.Minute})
		require.NoError(t, err)
		d, err := fleet.StartDetacher(s, fleet.DetacherConfig{Interval: time.Second,
			Controls: func(string) bool { return true }, Detach: func(context.Context, fleet.Stranded) error { return nil }})
		require.NoError(t, err)
		require.Eventually(t, gc.Leading, timeout, 10*time.Millisecond)
		time.Sleep(2 * time.Second) // past the term's first look, which reads the index once
		now := cpuOver(idleWindow)
		d.Stop()
		gc.Stop()
		t.Logf("| %d | %.2f%% | %.2f%% | %.2f%% |", n, alone, old, now)
		srv.Stop()
	}
}
