package member_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

// TestAMemberRejoiningUnderConcurrentClaimsKeepsRunning revokes a member's
// lease again and again while 32 goroutines of that member claim and
// release through its Router, as a loaded machine that lets the lease
// lapse does: each revocation makes the member join again as a new
// incarnation, and no request of the Router may reach an incarnation that
// has not started (it crashed the agent with a nil identity lookup). The
// member keeps running, and its claims go through again after each rejoin.
func TestAMemberRejoiningUnderConcurrentClaimsKeepsRunning(t *testing.T) {
	s := etcdtest.Start(t)
	all := startChildren(t, s, 2)
	require.Equal(t, "ok writers= readers=", all[1].ask("register vol multi-node-multi-writer"))
	require.Equal(t, "ok", all[0].ask("hammer vol 32"))
	for range 4 {
		revokeMemberLease(t, s, all[0])
		rejoined(t, s, all[0], all)
	}
	answer := strings.Fields(all[0].ask("hammered"))
	require.Len(t, answer, 3, "the hammer's counts: %v", answer)
	require.Equal(t, "ok", answer[0], "the hammer's answer: %v", answer)
	done, err := strconv.Atoi(answer[1])
	require.NoError(t, err)
	require.Positive(t, done, "no claim or release went through: %v", answer)
}
