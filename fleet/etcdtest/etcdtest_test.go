package etcdtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestAWriteSurvivesARestart writes a key, restarts the member, and reads
// it back through the same client, which reconnects by itself.
func TestAWriteSurvivesARestart(t *testing.T) {
	s := etcdtest.Start(t)
	c, err := clientv3.New(clientv3.Config{Endpoints: s.Endpoints(), DialTimeout: 5 * time.Second})
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
}
