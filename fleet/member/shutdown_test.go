package member_test

import (
	"fmt"
	"strings"
	"testing"

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
