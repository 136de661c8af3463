package member_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

// claimAll has each child claim v for writing by an alloc of its own,
// all at once, and returns their answers in order: the claims race.
func claimAll(cs []*child, v string, round int) []string {
	for _, c := range cs {
		c.send("claim %s alloc-%d-%s write", v, round, c.node)
	}
	answers := make([]string, len(cs))
	for i, c := range cs {
		answers[i] = c.next()
	}
	return answers
}

// owners maps each volume to the member whose grain answers for it, as
// member o sees it.
func owners(o *child, volumes []string) map[string]string {
	out := map[string]string{}
	for _, v := range volumes {
		out[v] = o.ask("owner %s", v)
	}
	return out
}

func TestTwoNodesRacingThroughTheGrainsNeverBothWrite(t *testing.T) {
	s := etcdtest.Start(t)
	cs := startChildren(t, s, 3)

	const rounds = 100
	volumes := make([]string, rounds)
	for i := range volumes {
		volumes[i] = fmt.Sprintf("vol-%d", i)
		require.Equal(t, "ok writers= readers=", cs[i%3].ask("register %s single-node-writer", volumes[i]))
	}
	hosts := map[string]bool{}
	for _, o := range owners(cs[0], volumes) {
		hosts[o] = true
	}
	require.Len(t, hosts, 3, "the rendezvous hash spreads %d volumes over the three members", rounds)

	for i, v := range volumes {
		racers := []*child{cs[i%3], cs[(i+1)%3]}
		answers := claimAll(racers, v, i)
		won := 0
		for _, a := range answers {
			if strings.HasPrefix(a, "ok ") {
				won++
			} else {
				require.True(t, strings.HasPrefix(a, "refused "), "the loser is refused, not failed: %s", a)
			}
		}
		require.Equal(t, 1, won, "round %d: exactly one of two nodes gets the writer slot: %v", i, answers)
		got := cs[(i+2)%3].ask("get %s", v)
		require.Regexp(t, `^ok writers=alloc-\d+-([abc])@([abc]) readers=$`, got, "the third member reads one writer")
	}
}

func TestAKilledMembersVolumesAnswerFromTheOthersWithTheirClaimsKept(t *testing.T) {
	s := etcdtest.Start(t)
	cs := startChildren(t, s, 3)

	volumes := make([]string, 30)
	writers := map[string]string{}
	for i := range volumes {
		volumes[i] = fmt.Sprintf("vol-%d", i)
		require.Equal(t, "ok writers= readers=", cs[0].ask("register %s single-node-writer", volumes[i]))
		c := cs[i%3]
		writers[volumes[i]] = fmt.Sprintf("alloc-%d@%s", i, c.node)
		require.Equal(t, "ok writers="+writers[volumes[i]]+" readers=", c.ask("claim %s alloc-%d write", volumes[i], i))
	}
	var orphans []string
	for v, o := range owners(cs[0], volumes) {
		if o == cs[2].id {
			orphans = append(orphans, v)
		}
	}
	require.NotEmpty(t, orphans, "member c hosts some of the grains")

	cs[2].kill()
	killed := time.Now()
	for _, v := range orphans {
		got := cs[0].ask("claim %s intruder write", v)
		require.True(t, strings.HasPrefix(got, "refused "), "the writer's claim on %s outlives the member that hosted its grain: %s", v, got)
		require.Equal(t, "ok writers="+writers[v]+" readers=", cs[1].ask("get %s", v), "no claim lost or doubled")
	}
	answeredAfter := time.Since(killed)
	t.Logf("the %d grains of the killed member answered from the others %v after the kill (lease TTL %v)",
		len(orphans), answeredAfter, childTTL)
	for _, v := range orphans {
		require.NotEqual(t, cs[2].id, cs[0].ask("owner %s", v), "the grain of %s moved", v)
	}
	for _, v := range volumes {
		require.Equal(t, "ok writers="+writers[v]+" readers=", cs[1].ask("get %s", v), "no claim lost or doubled")
	}
}

func TestTheGrainsAnswerAgainAfterAnEtcdRestart(t *testing.T) {
	s := etcdtest.Start(t)
	cs := startChildren(t, s, 2)
	require.Equal(t, "ok writers= readers=", cs[0].ask("register vol single-node-writer"))

	s.Restart()
	// The first claims after the restart may find etcd still electing its
	// leader ("unavailable"); a claim is safe to send again.
	var got string
	require.Eventually(t, func() bool {
		got = cs[1].ask("claim vol alloc-1 write")
		require.False(t, strings.HasPrefix(got, "refused ") || strings.HasPrefix(got, "error "), got)
		return strings.HasPrefix(got, "ok ")
	}, timeout, 100*time.Millisecond)
	require.Equal(t, "ok writers=alloc-1@b readers=", got)
	require.True(t, strings.HasPrefix(cs[0].ask("claim vol alloc-2 write"), "refused "), "the claim made after the restart holds")
	waitMembers(t, cs, cs...)
}

func TestAMemberCutOffFromEtcdRefusesClaimsAndRecovers(t *testing.T) {
	s := etcdtest.Start(t)
	cs := startChildren(t, s, 2)
	require.Equal(t, "ok writers= readers=", cs[0].ask("register vol single-node-writer"))

	s.Stop()
	got := cs[1].ask("claim vol alloc-1 write")
	require.True(t, strings.HasPrefix(got, "unavailable "), "no guess from memory: %s", got)
	require.Contains(t, got, "etcd", "the error says what did not answer")

	s.Restart()
	require.Eventually(t, func() bool { return strings.HasPrefix(cs[1].ask("claim vol alloc-1 write"), "ok ") }, timeout, 100*time.Millisecond)
	require.Equal(t, "ok writers=alloc-1@b readers=", cs[0].ask("get vol"))
}

// TestAnIdleGrainStopsAndTheNextRequestReadsItsVolumeFromEtcd lets a
// volume's grain sit idle past its timeout: it stops, and the next request
// activates it again, reading the volume from etcd, where another node
// changed it meanwhile.
func TestAnIdleGrainStopsAndTheNextRequestReadsItsVolumeFromEtcd(t *testing.T) {
	s := etcdtest.Start(t)
	c := startChild(t, s.Endpoints(), "a", childIdleEnv+"=300ms")
	waitMembers(t, []*child{c}, c)
	require.Equal(t, "0", c.ask("grains"))
	require.Equal(t, "ok writers= readers=", c.ask("register vol single-node-writer"))
	require.Equal(t, "ok writers=alloc-1@a readers=", c.ask("claim vol alloc-1 write"))
	grains := func() string { return c.ask("grains") }
	require.Eventually(t, func() bool { return grains() == "0" }, timeout, 50*time.Millisecond, "the idle grain stops")

	other, err := fleet.Open(context.Background(), fleet.Config{Endpoints: s.Endpoints(), NodeID: "b"})
	require.NoError(t, err)
	defer func() { require.NoError(t, other.Close()) }()
	_, err = other.Release(context.Background(), "", "vol", &model.Claim{AllocID: "alloc-1", State: model.ClaimStateReadyToFree})
	require.NoError(t, err)

	require.Equal(t, "ok writers=alloc-2@a readers=", c.ask("claim vol alloc-2 write"), "the new activation reads the release from etcd")
	require.Equal(t, "1", grains())
	require.Eventually(t, func() bool { return grains() == "0" }, timeout, 50*time.Millisecond, "and stops again when idle")
}
