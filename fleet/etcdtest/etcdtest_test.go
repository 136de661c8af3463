package etcdtest_test

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

func TestMain(m *testing.M) {
	etcdtest.RunIfChild()
	goleak.VerifyTestMain(m)
}

// TestAWriteSurvivesARestart writes a key, restarts the member, and reads
// it back through the same client, which reconnects by itself.
func TestAWriteSurvivesARestart(t *testing.T) {
	for name, start := range map[string]func(testing.TB) *etcdtest.Server{
		"plain":                  etcdtest.Start,
		"TLS":                    etcdtest.StartTLS,
		"TLS in a child process": etcdtest.StartProcessTLS,
	} {
		t.Run(name, func(t *testing.T) {
			s := start(t)
			c, err := clientv3.New(clientv3.Config{Endpoints: s.Endpoints(), TLS: s.ClientTLS(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			require.NoError(t, err)
			defer func() { require.NoError(t, c.Close()) }()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err = c.Put(ctx, "k", "v")
			require.NoError(t, err)

			s.Restart()

			resp, err := c.Get(ctx, "k")
			require.NoError(t, err)
			require.Len(t, resp.Kvs, 1)
			require.Equal(t, "v", string(resp.Kvs[0].Value))
		})
	}
}

// TestATLSMemberRefusesAClientWithoutItsCertificate: the client URL is
// https, and a client that trusts the member's CA but presents no
// certificate reads nothing, directly or through a proxy.
func TestATLSMemberRefusesAClientWithoutItsCertificate(t *testing.T) {
	s := etcdtest.StartTLS(t)
	require.Regexp(t, `^https://127\.0\.0\.1:\d+$`, s.Endpoints()[0])
	p := s.Proxy(t)
	require.Regexp(t, `^https://`, p.Endpoints()[0])
	noCert := s.ClientTLS()
	noCert.Certificates = nil
	for name, endpoints := range map[string][]string{"direct": s.Endpoints(), "through a proxy": p.Endpoints()} {
		t.Run(name, func(t *testing.T) {
			c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: noCert.Clone(), Logger: zap.NewNop()})
			require.NoError(t, err)
			defer func() { require.NoError(t, c.Close()) }()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err = c.Get(ctx, "k")
			require.Error(t, err)

			good, err := clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: s.ClientTLS(), DialTimeout: 30 * time.Second, Logger: zap.NewNop()})
			require.NoError(t, err)
			defer func() { require.NoError(t, good.Close()) }()
			ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err = good.Get(ctx, "k")
			require.NoError(t, err)
		})
	}
	require.NotEmpty(t, s.Files().CA)
	require.Empty(t, etcdtest.Start(t).Files(), "a plain member has no files")
	var none *tls.Config
	require.Equal(t, none, etcdtest.Start(t).ClientTLS())
}
