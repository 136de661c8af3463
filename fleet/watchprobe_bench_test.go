package fleet_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/internal/cputime"
)

// BenchmarkNodeWatchProbe runs the probe that a node's watch of its claims
// (WatchNode) makes once a quarter lease TTL, on a node holding 100, 1,000
// and 10,000 claims (one embedded etcd, the volumes written by
// fleet.Fill): a progress request, a count-only read of the node's key,
// and a keys-only read of the node's claim index at the revision the watch
// last heard, compared with the watch's copy. It reports the CPU of a
// probe (the process's, the embedded etcd's included) and the share of
// one core the probes of one node take at the default lease TTL.
func BenchmarkNodeWatchProbe(b *testing.B) {
	srv := etcdtest.Start(b)
	s := open(b, srv, "node-0")
	held := 0
	for _, claims := range []int{100, 1_000, 10_000} {
		b.Run(fmt.Sprintf("claims=%d", claims), func(b *testing.B) {
			var vols []*model.CSIVolume
			for ; held < claims; held++ {
				v := volume(fmt.Sprintf("probe-%d", held), model.AccessModeSingleNodeWriter)
				v.WriteClaims[fmt.Sprintf("alloc-%d", held)] = writeClaim(fmt.Sprintf("alloc-%d", held), "node-0")
				vols = append(vols, v)
			}
			require.NoError(b, fleet.Fill(testCtx(b), s, vols))
			nodes, err := s.Nodes(testCtx(b))
			require.NoError(b, err)
			require.Len(b, nodes[0].Claims, claims)
			probe, err := fleet.NodeWatchProbe(testCtx(b), s)
			require.NoError(b, err)
			b.ResetTimer()
			cpu := cputime.Used()
			for range b.N {
				if why := probe(testCtx(b)); why != "" {
					b.Fatalf("the probe says the watch cannot go on: %s", why)
				}
			}
			b.StopTimer()
			perProbe := (cputime.Used() - cpu) / time.Duration(b.N)
			b.ReportMetric(float64(perProbe.Microseconds()), "cpu-µs/probe")
			b.ReportMetric(100*perProbe.Seconds()/(fleet.DefaultLeaseTTL/4).Seconds(), "%core/node")
		})
	}
}
