package agent_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

// TestAnEtcdReachedInTheClearOffThisHostIsRefused: the agent refuses,
// before it opens anything, an etcd it would reach without TLS on another
// host, or partly without TLS; plain HTTP on loopback is allowed.
func TestAnEtcdReachedInTheClearOffThisHostIsRefused(t *testing.T) {
	withTLS := &tls.Config{MinVersion: tls.VersionTLS12}
	for _, c := range []struct {
		name    string
		cluster agent.ClusterConfig
		want    string
	}{
		{"http on another host", agent.ClusterConfig{Etcd: []string{"http://10.0.0.2:2379"}},
			"Cluster.Etcd (-cluster-etcd) http://10.0.0.2:2379 is reached without TLS off this host"},
		{"http on another host even with a TLS config", agent.ClusterConfig{Etcd: []string{"http://etcd.example.com:2379"}, EtcdTLS: withTLS},
			"http://etcd.example.com:2379 is reached without TLS off this host"},
		{"host:port without TLS", agent.ClusterConfig{Etcd: []string{"10.0.0.2:2379"}}, "10.0.0.2:2379 is reached without TLS off this host"},
		{"http first, then https", agent.ClusterConfig{Etcd: []string{"http://127.0.0.1:2379", "https://10.0.0.3:2379"}, EtcdTLS: withTLS},
			"mixes plain and TLS URLs (plain: http://127.0.0.1:2379)"},
		{"a user without a password", agent.ClusterConfig{Etcd: []string{"https://10.0.0.2:2379"}, EtcdUsername: "plugvisor"},
			"Cluster.EtcdUsername and Cluster.EtcdPassword (-cluster-etcd-username, -cluster-etcd-password-file) go together"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cluster.Address = "127.0.0.1:0"
			err := agent.Config{Cluster: &c.cluster}.Validate()
			require.ErrorIs(t, err, agent.ErrInvalidConfig)
			require.ErrorContains(t, err, c.want)
			if c.cluster.EtcdUsername == "" && len(c.cluster.Etcd) == 1 {
				require.ErrorContains(t, err, "give https:// URLs with -cluster-etcd-ca, -cluster-etcd-cert and -cluster-etcd-key")
			}
			dir := dataDir(t)
			a, err := agent.Start(agent.Config{DataDir: dir, Cluster: &c.cluster})
			require.ErrorIs(t, err, agent.ErrInvalidConfig)
			require.Nil(t, a)
			require.NoFileExists(t, dir+"/state.db", "nothing was opened")
		})
	}
	for _, ok := range []agent.ClusterConfig{
		{Etcd: []string{"http://127.0.0.1:2379", "http://[::1]:2379", "http://localhost:2379"}},
		{Etcd: []string{"https://10.0.0.2:2379", "10.0.0.3:2379"}, EtcdTLS: withTLS},
		{Etcd: []string{"unix:///run/etcd.sock"}},
		{Etcd: []string{"https://10.0.0.2:2379"}, EtcdUsername: "plugvisor", EtcdPassword: "pw"},
	} {
		ok.Address = "127.0.0.1:0"
		require.NoError(t, agent.Config{Cluster: &ok}.Validate(), "%v", ok.Etcd)
	}
}

// TestAnAgentOnAPlainLoopbackEtcdWarnsAtStart: plain HTTP on loopback
// works, and says at every start what it leaves open.
func TestAnAgentOnAPlainLoopbackEtcdWarnsAtStart(t *testing.T) {
	srv := etcdtest.StartProcess(t) // the agent's cluster member starts a protoactor remote
	var log probe.LogBuffer
	a, err := agent.Start(agent.Config{DataDir: dataDir(t), Logger: logTo(&log), NodeID: "n1",
		Cluster: &agent.ClusterConfig{Etcd: srv.Endpoints(), Address: "127.0.0.1:0", LeaseTTL: fleet.MinLeaseTTL}})
	require.NoError(t, err)
	require.NoError(t, a.Shutdown(context.Background()))
	require.Contains(t, log.String(), "[WARN]  plugvisor: INSECURE: etcd is reached without TLS ("+srv.Endpoints()[0]+"): every process on this host can read the fleet's state")
}

// TestAnAgentAuthenticatesToEtcdWithItsCertificateAndAPassword runs an
// agent against an etcd with TLS, client certificates and auth enabled:
// with the etcd user's password it joins and writes under the fleet's
// prefix; with its certificate alone (whose name is no etcd user) it is
// refused. The password is never logged.
func TestAnAgentAuthenticatesToEtcdWithItsCertificateAndAPassword(t *testing.T) {
	srv := etcdtest.StartProcessTLS(t)
	const password = "correct horse battery staple"
	enableAuth(t, srv, "plugvisor", password)

	var log probe.LogBuffer
	cluster := agent.ClusterConfig{Etcd: srv.Endpoints(), EtcdTLS: srv.ClientTLS(), Address: "127.0.0.1:0", LeaseTTL: fleet.MinLeaseTTL,
		RequestTimeout: 5 * time.Second}
	refused := cluster
	// The refused agent starts last: it is refused before its member
	// starts a protoactor remote, which sets gRPC's global logger, racing
	// (under -race) with an etcd client still closing in the process.
	cluster.EtcdUsername, cluster.EtcdPassword = "plugvisor", password
	a, err := agent.Start(agent.Config{DataDir: dataDir(t), Logger: logTo(&log), NodeID: "n1", Cluster: &cluster})
	require.NoError(t, err)
	status, body, err := call(unixClient(t, a), "POST", "http://plugvisor/v1/volumes", "",
		`{"id":"db","plugin_id":"hp","access_mode":"single-node-writer","attachment_mode":"file-system"}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, body)
	require.NoError(t, a.Shutdown(context.Background()))
	require.NotContains(t, log.String(), password)
	require.NotContains(t, log.String(), "INSECURE: etcd", "etcd is reached with TLS")

	a, err = agent.Start(agent.Config{DataDir: dataDir(t), Logger: logTo(&log), NodeID: "n2", Cluster: &refused})
	require.Error(t, err, "the certificate's name, cli, is no etcd user")
	require.ErrorContains(t, err, "etcdserver: permission denied")
	require.Nil(t, a)

	c := userClient(t, srv, "plugvisor", password)
	resp, err := c.Get(context.Background(), fleet.DefaultPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	require.NotZero(t, resp.Count, "the agent wrote the fleet's keys")
}

// enableAuth turns on etcd's auth on srv, with a root user and user, whose
// role may read and write the fleet's prefix. Its client is closed when it
// returns: an etcd client at work while an agent's member starts its
// remote races with the remote setting gRPC's global logger.
func enableAuth(t *testing.T, srv *etcdtest.Server, user, password string) {
	t.Helper()
	c := userClient(t, srv, "", "")
	defer func() { require.NoError(t, c.Close()) }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, step := range []func() error{
		func() error { _, err := c.UserAdd(ctx, "root", "root-password"); return err },
		func() error { _, err := c.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := c.RoleAdd(ctx, "fleet"); return err },
		func() error {
			_, err := c.RoleGrantPermission(ctx, "fleet", fleet.DefaultPrefix, clientv3.GetPrefixRangeEnd(fleet.DefaultPrefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := c.UserAdd(ctx, user, password); return err },
		func() error { _, err := c.UserGrantRole(ctx, user, "fleet"); return err },
		func() error { _, err := c.AuthEnable(ctx); return err },
	} {
		require.NoError(t, step())
	}
}

// userClient is a client of srv with its client certificate, as user when
// one is given.
func userClient(t *testing.T, srv *etcdtest.Server, user, password string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), TLS: srv.ClientTLS(), Username: user, Password: password,
		DialTimeout: time.Minute, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}
