package embedded_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/plugvisor/plugvisor/fleet/embedded"
)

func TestAMemberOffLoopbackIsRefusedBeforeItStarts(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ name, client, peer string }{
		{"a client URL on every interface", "http://0.0.0.0:2379", "http://127.0.0.1:2380"},
		{"a peer URL on another host", "http://127.0.0.1:2379", "http://10.1.2.3:2380"},
	} {
		t.Run(c.name, func(t *testing.T) {
			client, err := url.Parse(c.client)
			require.NoError(t, err)
			peer, err := url.Parse(c.peer)
			require.NoError(t, err)
			_, err = embedded.Start(embedded.Config{Dir: dir, Client: client, Peer: peer})
			require.ErrorIs(t, err, embedded.ErrNotLoopback)
			require.ErrorContains(t, err, "http://127.0.0.1:PORT")
		})
	}
	require.NoDirExists(t, dir+"/member", "nothing was written")
}

// TestAMemberCompactsItsHistoryByItself starts a member that keeps 1 s of
// history, writes to it, and waits until a read at the first revisions
// fails because the member compacted them.
func TestAMemberCompactsItsHistoryByItself(t *testing.T) {
	client, peer := freeURL(t), freeURL(t)
	e, err := embedded.Start(embedded.Config{Dir: t.TempDir(), Client: client, Peer: peer, CompactionRetention: time.Second})
	require.NoError(t, err)
	t.Cleanup(e.Close)
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{client.String()}, DialTimeout: 30 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var first int64
	for i := range 20 {
		resp, err := c.Put(ctx, "key", fmt.Sprint(i))
		require.NoError(t, err)
		first = cmp.Or(first, resp.Header.Revision)
	}
	require.Eventually(t, func() bool {
		_, err := c.Put(ctx, "key", "more") // the periodic compactor compacts a revision it saw
		require.NoError(t, err)
		_, err = c.Get(ctx, "key", clientv3.WithRev(first))
		return errors.Is(err, rpctypes.ErrCompacted)
	}, 30*time.Second, 100*time.Millisecond, "the member compacts revisions older than its retention")
}

// freeURL is an http URL on a loopback port free a moment ago.
func freeURL(t *testing.T) *url.URL {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, l.Close())
	return &url.URL{Scheme: "http", Host: l.Addr().String()}
}
