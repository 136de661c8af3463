package member_test

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

// TestAClaimWhoseAnswerIsLostIsResolvedNeverAnsweredRefused cuts member a
// off from the others' traffic into its port, while it reaches etcd and
// their ports: its claims reach the volume's grain on another member and
// commit there, but their answers never come back. Each claim is resolved
// by reading it back once the Router gave up (after a tombstone that
// keeps it from committing later): every one that is held in etcd
// afterwards was answered ok. While cut, x hears no other member, and
// they do not hear x, and each says so (Member.Unreachable, which the
// agent's health reports), until the cut heals. Before, all of them were answered
// "no member answered … changes are refused", and committed all the same.
func TestAClaimWhoseAnswerIsLostIsResolvedNeverAnsweredRefused(t *testing.T) {
	s := etcdtest.Start(t)
	listen := freeAddress(t)
	proxy := etcdtest.NewProxy(t, listen)
	a := startChild(t, s.Endpoints(), "x", childAddressEnv+"="+listen, childAdvertiseEnv+"="+proxy.Address(), childTimeoutEnv+"=2s")
	others := []*child{startChild(t, s.Endpoints(), "y"), startChild(t, s.Endpoints(), "z")}
	all := append([]*child{a}, others...)
	waitMembers(t, all, all...)
	vol := ""
	for _, name := range []string{"v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8"} {
		require.Equal(t, "ok writers= readers=", others[0].ask("register %s multi-node-multi-writer", name))
		if owner := a.ask("owner %s", name); owner != "" && owner != a.id {
			vol = name
			break
		}
	}
	require.NotEmpty(t, vol, "a volume whose grain runs on another member")
	// x knows where the grain is, as after any claim through it.
	require.Equal(t, "ok writers=c0@x readers=", a.ask("claim %s c0 write", vol))

	proxy.Cut()
	// Both sides see the cut, and say so in their health.
	require.Eventually(t, func() bool {
		got := a.ask("unreachable")
		return strings.Contains(got, others[0].id) && strings.Contains(got, others[1].id)
	}, timeout, 50*time.Millisecond, "x hears no member")
	require.Eventually(t, func() bool { return strings.Contains(others[0].ask("unreachable"), a.id) }, timeout, 50*time.Millisecond)
	answers := strings.Fields(a.ask("claims %s 12", vol))
	proxy.Heal()
	for _, c := range all {
		require.Eventually(t, func() bool { return c.ask("unreachable") == "none" }, timeout, 50*time.Millisecond, "%s hears every member again", c.node)
	}
	require.Equal(t, "ok", answers[0])
	t.Logf("answers: %v", answers[1:])
	held := others[0].ask("get %s", vol)
	writers := strings.Split(strings.TrimPrefix(strings.Fields(held)[1], "writers="), ",")
	for i, kind := range answers[1:] {
		alloc := fmt.Sprintf("c%d", i+1)
		committed := slices.Contains(writers, alloc+"@x")
		require.NotEqual(t, "refused", kind, "claim %s", alloc)
		require.NotEqual(t, "error", kind, "claim %s", alloc)
		if committed {
			require.Equal(t, "ok", kind, "claim %s is held in etcd (%s), and was answered %s", alloc, held, kind)
		} else {
			require.NotEqual(t, "ok", kind, "claim %s was answered ok and is not held (%s)", alloc, held)
		}
	}
}

// TestAClaimWhoseWriteToEtcdGoesUnansweredIsNeverAnsweredUnavailable
// has the grain of a volume run on member x, whose etcd is behind a proxy
// that then drops what etcd sends back: x's claim reaches etcd and is
// applied, but its answer never comes. The claim is answered "outcome
// unknown" (or ok), never "unavailable", which says it was not applied.
// Before, the grain's timed-out write was answered unavailable, and a
// caller that trusted it left a claim in etcd that nobody would release.
func TestAClaimWhoseWriteToEtcdGoesUnansweredIsNeverAnsweredUnavailable(t *testing.T) {
	s := etcdtest.Start(t)
	proxy := s.Proxy(t)
	a := startChild(t, proxy.Endpoints(), "x", childTimeoutEnv+"=2s")
	others := []*child{startChild(t, s.Endpoints(), "y"), startChild(t, s.Endpoints(), "z")}
	all := append([]*child{a}, others...)
	waitMembers(t, all, all...)
	vol := ""
	for i := range 32 { // the grains of 32 volumes all run elsewhere once in 400,000
		name := fmt.Sprintf("v%d", i)
		require.Equal(t, "ok writers= readers=", others[0].ask("register %s multi-node-multi-writer", name))
		if a.ask("owner %s", name) == a.id {
			vol = name
			break
		}
	}
	require.NotEmpty(t, vol, "a volume whose grain runs on x")
	// The grain holds the volume as it wrote it: the next claim is one
	// write, with no read before it.
	require.Equal(t, "ok writers=c0@x readers=", a.ask("claim %s c0 write", vol))

	proxy.Mute()
	got := a.ask("claim %s c1 write", vol)
	proxy.Heal()
	held := others[0].ask("get %s", vol)
	require.Contains(t, held, "c1@x", "the claim reached etcd and was applied")
	kind, _, _ := strings.Cut(got, " ")
	require.Contains(t, []string{"ok", "unknown"}, kind, "an applied claim is answered: %s", got)
}

// freeAddress is a loopback host:port that was free a moment ago.
func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}
