package member_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/fleet/member"
)

// TestAMemberWhoseLeaseLapsedIsAMemberAgainForAll revokes a live member's
// lease, as etcd expires it when a loaded machine delays its renewals: the
// member joins again under a new member ID (protoactor blocks the old one
// for good), and every member must then see it again.
func TestAMemberWhoseLeaseLapsedIsAMemberAgainForAll(t *testing.T) {
	s := etcdtest.Start(t)
	cs := startChildren(t, s, 2)
	c, err := clientv3.New(clientv3.Config{Endpoints: s.Endpoints(), DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	ctx := context.Background()
	key := fleet.DefaultPrefix + "members/" + member.DefaultClusterName + "/" + cs[0].id
	resp, err := c.Get(ctx, key)
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	_, err = c.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	require.NoError(t, err)

	old := cs[0].id
	require.Eventually(t, func() bool { cs[0].id = cs[0].ask("id"); return cs[0].id != old }, timeout, 50*time.Millisecond,
		"the member joins again under a new ID")
	require.Eventually(t, func() bool { return memberKeys(t, s) == 2 }, timeout, 50*time.Millisecond, "the member registers again")
	waitMembers(t, cs, cs...)
}
