package member

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

// TestRevokingALeaseEtcdAlreadyDroppedIsDone is a member stopping after
// an etcd outage during which its lease expired: the lease is gone, and
// its key with it, so there is nothing left to revoke and the stop is
// clean.
func TestRevokingALeaseEtcdAlreadyDroppedIsDone(t *testing.T) {
	s := etcdtest.Start(t)
	c, err := clientv3.New(clientv3.Config{Endpoints: s.Endpoints(), DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	ctx := context.Background()
	lease, err := c.Grant(ctx, 2)
	require.NoError(t, err)
	_, err = c.Revoke(ctx, lease.ID) // as its expiry would
	require.NoError(t, err)

	p := &provider{client: c, lease: lease.ID, key: "/plugvisor/members/plugvisor/m", ttl: 2 * time.Second, timeout: 5 * time.Second}
	require.NoError(t, p.revoke())
	require.Equal(t, clientv3.NoLease, p.lease)
}
