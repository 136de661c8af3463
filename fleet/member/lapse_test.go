package member_test

import (
	"context"
	"slices"
	"strings"
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
	revokeMemberLease(t, s, cs[0])
	rejoined(t, s, cs[0], cs)
}

// rejoined waits until c joins again under a new member ID (one it sees
// itself: a join that failed had an ID too), and every member of all sees
// every one again.
func rejoined(t *testing.T, s *etcdtest.Server, c *child, all []*child) {
	t.Helper()
	old := c.id
	require.Eventually(t, func() bool { c.id = c.ask("id"); return c.id != old && slices.Contains(c.members(), c.id) }, timeout, 50*time.Millisecond,
		"the member joins again under a new ID")
	require.Eventually(t, func() bool { return memberKeys(t, s) == int64(len(all)) }, timeout, 50*time.Millisecond, "the member registers again")
	waitMembers(t, all, all...)
}

// TestAMemberWhoseLeaseLapsedInAnOutageComesBackByItself cuts a member
// off from etcd (a proxy), while etcd and the other member go on, for
// longer than its lease: etcd expires its leases, the other member sees
// it leave, and the member, which cannot reach etcd, keeps trying and
// stays fenced (its standing lost) for as long as the outage lasts. Once
// etcd answers it again, it joins again by itself, under a new ID, and
// holds a new lease: its standing is held, and claims go through it.
func TestAMemberWhoseLeaseLapsedInAnOutageComesBackByItself(t *testing.T) {
	s := etcdtest.Start(t)
	proxy := s.Proxy(t)
	cut := startChild(t, proxy.Endpoints(), "cut")
	other := startChild(t, s.Endpoints(), "other")
	all := []*child{cut, other}
	waitMembers(t, all, all...)
	require.Equal(t, "ok writers= readers=", other.ask("register vol multi-node-multi-writer"))

	proxy.Cut()
	waitMembers(t, []*child{other}, other) // its member key expired
	require.Eventually(t, func() bool { return cut.ask("standing") == "lost" }, timeout, 50*time.Millisecond)
	for until := time.Now().Add(2 * childTTL); time.Now().Before(until); time.Sleep(100 * time.Millisecond) {
		require.Equal(t, "lost", cut.ask("standing"), "the member stays fenced while etcd is out of its reach")
	}

	proxy.Heal()
	rejoined(t, s, cut, all)
	require.Eventually(t, func() bool { return cut.ask("standing") == "held" }, timeout, 50*time.Millisecond)
	require.Equal(t, "ok writers=a1@cut readers=", cut.ask("claim vol a1 write"))
	require.Equal(t, "ok writers=a1@cut,a2@other readers=", other.ask("claim vol a2 write"))
}

// TestAMemberThatCannotRegisterAgainKeepsTryingUntilEtcdAnswers revokes
// a member's lease when its connections to etcd still work but no new
// one can be made: the member learns of the lapse, and its new
// incarnation, whose new etcd client cannot reach etcd, cannot register;
// it tries again until it can, then every member sees it again.
func TestAMemberThatCannotRegisterAgainKeepsTryingUntilEtcdAnswers(t *testing.T) {
	s := etcdtest.Start(t)
	proxy := s.Proxy(t)
	all := []*child{startChild(t, proxy.Endpoints(), "a"), startChild(t, s.Endpoints(), "b")}
	waitMembers(t, all, all...)

	proxy.RefuseNew()
	revokeMemberLease(t, s, all[0])
	require.Eventually(t, func() bool {
		return strings.Contains(all[0].stderr.String(), "cannot join the cluster again; retrying")
	},
		timeout, 50*time.Millisecond, "the new incarnation cannot reach etcd")
	waitMembers(t, all[1:], all[1])

	proxy.Heal()
	rejoined(t, s, all[0], all)
	require.Equal(t, "ok writers= readers=", all[1].ask("register vol multi-node-multi-writer"))
	require.Equal(t, "ok writers=x@a readers=", all[0].ask("claim vol x write"))
}

// revokeMemberLease revokes the lease of c's member key, as etcd expires
// it when c does not renew it in time.
func revokeMemberLease(t *testing.T, s *etcdtest.Server, c *child) {
	t.Helper()
	client, err := clientv3.New(clientv3.Config{Endpoints: s.Endpoints(), DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer func() { require.NoError(t, client.Close()) }()
	ctx := context.Background()
	resp, err := client.Get(ctx, fleet.DefaultPrefix+"members/"+member.DefaultClusterName+"/"+c.id)
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	_, err = client.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	require.NoError(t, err)
}

// TestAMemberWhoseLeaseLapsedRejoinsAFleetOnMutualTLS is the lapse of
// TestAMemberWhoseLeaseLapsedIsAMemberAgainForAll in a fleet whose
// members talk over mutual TLS: the new incarnation shakes hands with the
// members there before it registers, and every member sees it again.
func TestAMemberWhoseLeaseLapsedRejoinsAFleetOnMutualTLS(t *testing.T) {
	s := etcdtest.Start(t)
	pki := childTLSEnv + "=" + memberPKI(t)
	all := []*child{startChild(t, s.Endpoints(), "a", pki), startChild(t, s.Endpoints(), "b", pki)}
	waitMembers(t, all, all...)
	revokeMemberLease(t, s, all[0])
	rejoined(t, s, all[0], all)
	require.Equal(t, "ok writers= readers=", all[1].ask("register vol multi-node-multi-writer"))
	require.Equal(t, "ok writers=x@a readers=", all[0].ask("claim vol x write"))
}
