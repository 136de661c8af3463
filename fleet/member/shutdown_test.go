package member_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

// TestAFleetThatStopsCleanlyLogsNoError runs two members that send each
// other grain requests, then stops one and the other: a clean stop is no
// error, so neither logs one, though each loses its connection to the
// other.
func TestAFleetThatStopsCleanlyLogsNoError(t *testing.T) {
	s := etcdtest.Start(t)
	cs := startChildren(t, s, 2)
	for i := range 10 { // volumes on both members, asked from both
		v := fmt.Sprintf("vol-%d", i)
		require.Equal(t, "ok writers= readers=", cs[i%2].ask("register %s multi-node-multi-writer", v))
		require.Equal(t, "ok writers= readers=", cs[(i+1)%2].ask("get %s", v))
	}

	cs[1].stop()
	cs[0].stop()
	for _, c := range cs {
		for _, line := range strings.Split(c.stderr.String(), "\n") {
			require.NotContains(t, line, "[ERROR]", "member %s logged an error on a clean stop", c.node)
		}
	}
}

// TestAMemberThatStillCountsAStoppedOneLogsNoErrorDialingIt stops a member
// while the other cannot hear from etcd that it left (the other's
// connections to etcd are cut): the other keeps dialling the stopped one
// (gossip, once a second) and fails, which is trouble with a peer, a
// warning at most, never an error.
func TestAMemberThatStillCountsAStoppedOneLogsNoErrorDialingIt(t *testing.T) {
	s := etcdtest.Start(t)
	proxy := s.Proxy(t)
	a, b := startChild(t, proxy.Endpoints(), "a"), startChild(t, s.Endpoints(), "b")
	waitMembers(t, []*child{a, b}, a, b)
	for i := range 4 { // grains on both members, so that they talk
		require.Equal(t, "ok writers= readers=", a.ask("register vol-%d multi-node-multi-writer", i))
	}

	proxy.Cut()
	b.stop()
	require.Eventually(t, func() bool { return strings.Contains(a.stderr.String(), "EndpointWriter failed to connect") }, timeout, 50*time.Millisecond,
		"member a dials the member it still counts")
	proxy.Heal()
	// (a's own lease may have lapsed meanwhile, and a joined again)
	require.Eventually(t, func() bool { return !slices.Contains(a.members(), b.id) }, timeout, 50*time.Millisecond,
		"member a sees b leave")
	a.stop()
	for _, line := range strings.Split(a.stderr.String(), "\n") {
		require.NotContains(t, line, "[ERROR]", "member a logged an error")
	}
}
