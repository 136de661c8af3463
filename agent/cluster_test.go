package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/fleet/member"
)

func TestABadClusterConfigIsRefusedAndStartsNothing(t *testing.T) {
	dir := dataDir(t)
	for _, tc := range []struct {
		name    string
		cluster agent.ClusterConfig
		want    string
	}{
		{"a member on every interface", agent.ClusterConfig{Etcd: []string{"http://127.0.0.1:1"}, Address: "0.0.0.0:7946"},
			"listens on every interface"},
		{"a public member address without TLS", agent.ClusterConfig{Etcd: []string{"http://127.0.0.1:1"}, Address: "192.0.2.1:7946"},
			"TLS is not set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := agent.Start(agent.Config{DataDir: dir, Cluster: &tc.cluster})
			require.ErrorIs(t, err, member.ErrInvalidConfig)
			require.ErrorContains(t, err, "cluster mode: ")
			require.ErrorContains(t, err, tc.want)
			require.Nil(t, a)
		})
	}
	for _, tc := range []struct {
		name    string
		cluster agent.ClusterConfig
		want    string
	}{
		{"a negative GC interval", agent.ClusterConfig{GCInterval: -time.Second}, "Cluster.GCInterval is -1s"},
		{"a grace the fence cannot beat", agent.ClusterConfig{LeaseTTL: 10 * time.Second, GCGrace: 12 * time.Second},
			"the GC's grace (-cluster-gc-grace 12s) must be longer than the lease TTL (-cluster-lease-ttl 10s) plus the fence margin (-cluster-fence-margin 5s)"},
		{"the default grace under a long lease", agent.ClusterConfig{LeaseTTL: 5 * time.Minute}, "give -cluster-gc-grace 5m6s or more"},
		{"a negative fence margin", agent.ClusterConfig{FenceMargin: -time.Second}, "Cluster.FenceMargin (-cluster-fence-margin) is -1s"},
		{"a negative compaction interval", agent.ClusterConfig{CompactInterval: -time.Second}, "Cluster.CompactInterval is -1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := agent.Start(agent.Config{DataDir: dir, Cluster: &tc.cluster})
			require.ErrorIs(t, err, agent.ErrInvalidConfig)
			require.ErrorContains(t, err, tc.want)
			require.Nil(t, a)
		})
	}

	a := startAgent(t, dir)
	require.NoError(t, a.Shutdown(context.Background()), "the refused starts left the data dir free")
}
