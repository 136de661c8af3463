package fleet_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

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
//
// Each size runs the probe ("plugvisor"), then its baseline ("bare"): the
// same three requests from a plain etcd client of its own, with the index
// read at the same revision and its answer not compared with anything.
// What the probe costs beyond etcd's part is the difference.
func BenchmarkNodeWatchProbe(b *testing.B) {
	srv := etcdtest.Start(b)
	s := open(b, srv, "node-0")
	client, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: timeout, Logger: zap.NewNop()})
	require.NoError(b, err)
	defer client.Close()
	nodeKey, claimsPrefix := fleet.NodeWatchKeys(s)
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
			b.Run("plugvisor", func(b *testing.B) {
				measureProbes(b, func() {
					if why := probe(testCtx(b)); why != "" {
						b.Fatalf("the probe says the watch cannot go on: %s", why)
					}
				})
			})
			b.Run("bare", func(b *testing.B) {
				at, err := client.Get(testCtx(b), nodeKey, clientv3.WithCountOnly())
				require.NoError(b, err)
				measureProbes(b, func() {
					_ = client.RequestProgress(testCtx(b))
					_, err := client.Get(testCtx(b), nodeKey, clientv3.WithCountOnly())
					require.NoError(b, err)
					resp, err := client.Get(testCtx(b), claimsPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithRev(at.Header.Revision))
					require.NoError(b, err)
					require.Len(b, resp.Kvs, claims)
				})
			})
		})
	}
}

// measureProbes runs probe b.N times and reports the CPU of one (the
// process's, the embedded etcd's included) and the share of one core a
// node's probes take at the default lease TTL.
func measureProbes(b *testing.B, probe func()) {
	b.ResetTimer()
	cpu := cputime.Used()
	for range b.N {
		probe()
	}
	b.StopTimer()
	perProbe := (cputime.Used() - cpu) / time.Duration(b.N)
	b.ReportMetric(float64(perProbe.Microseconds()), "cpu-µs/probe")
	b.ReportMetric(100*perProbe.Seconds()/(fleet.DefaultLeaseTTL/4).Seconds(), "%core/node")
}
