package member_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

// startChildren starts n members in child processes on one etcd.
func startChildren(t *testing.T, s *etcdtest.Server, n int) []*child {
	t.Helper()
	cs := make([]*child, n)
	for i := range cs {
		cs[i] = startChild(t, s.Endpoints(), string(rune('a'+i)))
	}
	waitMembers(t, cs, cs...)
	return cs
}

// memberKeys counts the member keys in etcd.
func memberKeys(t *testing.T, s *etcdtest.Server) int64 {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: s.Endpoints(), DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	resp, err := c.Get(context.Background(), fleet.DefaultPrefix+"members/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	return resp.Count
}

func TestThreeMembersSeeEachOtherAndAStoppedOneLeavesAtOnce(t *testing.T) {
	s := etcdtest.Start(t)
	cs := startChildren(t, s, 3)

	cs[2].stop()
	require.Equal(t, int64(2), memberKeys(t, s), "a member that stops revokes its lease: its key goes at once")
	waitMembers(t, cs[:2], cs[:2]...)
}

func TestAKilledMemberLeavesWhenItsLeaseExpires(t *testing.T) {
	s := etcdtest.Start(t)
	cs := startChildren(t, s, 3)

	cs[2].kill()
	killed := time.Now()
	require.Equal(t, int64(3), memberKeys(t, s), "a killed member's key stays until its lease expires")
	waitMembers(t, cs[:2], cs[:2]...)
	t.Logf("the others saw the killed member leave after %v (lease TTL %v)", time.Since(killed), childTTL)
	for _, c := range cs[:2] {
		require.NotContains(t, c.stderr.String(), "sendGossipForMember failed",
			"member %s's gossip tried the killed member every second until it left: at debug level", c.node)
	}
}

func TestAnAddressInUseIsAnErrorAndLeavesNothingBehind(t *testing.T) {
	s := etcdtest.Start(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=a", childEtcdEnv+"="+strings.Join(s.Endpoints(), ","),
		childAddressEnv+"="+l.Addr().String())
	out, err := cmd.Output()
	require.Error(t, err, "the child exits 1")
	require.Contains(t, string(out), "error join the cluster at "+l.Addr().String())
	require.Zero(t, memberKeys(t, s), "the member registered nothing")
}
