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
			require.ErrorContains(t, err, "agent: cluster mode: ")
			require.ErrorContains(t, err, tc.want)
			require.Nil(t, a)
		})
	}
	a, err := agent.Start(agent.Config{DataDir: dir, Cluster: &agent.ClusterConfig{GCInterval: -time.Second}})
	require.ErrorIs(t, err, agent.ErrInvalidConfig)
	require.ErrorContains(t, err, "Cluster.GCInterval is -1s")
	require.Nil(t, a)
	a, err = agent.Start(agent.Config{DataDir: dir, Cluster: &agent.ClusterConfig{CompactInterval: -time.Second}})
	require.ErrorIs(t, err, agent.ErrInvalidConfig)
	require.ErrorContains(t, err, "Cluster.CompactInterval is -1s")
	require.Nil(t, a)

	a = startAgent(t, dir)
	require.NoError(t, a.Shutdown(context.Background()), "the refused starts left the data dir free")
}
