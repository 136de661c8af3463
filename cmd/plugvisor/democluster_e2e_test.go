package main

import (
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTheClusterDemoKeepsOneWriterThroughARaceAndADeadNode runs
// `plugvisor demo-cluster`: etcd and three agents in child processes, two
// of them racing for one single-node-writer volume, the winner killed
// with SIGKILL. Exactly one claim wins, the fleet then counts one node
// fewer, the loser stays refused until the fleet's GC frees the dead
// node's claim, then wins, and nothing is left running.
func TestTheClusterDemoKeepsOneWriterThroughARaceAndADeadNode(t *testing.T) {
	stdout, stderr, code := cli(t, "demo-cluster")
	require.Zero(t, code, "demo-cluster failed:\n%s\n%s", stdout, stderr)
	won := regexp.MustCompile(`(n[23]) won; (n[23]) was refused`).FindStringSubmatch(stdout)
	require.Len(t, won, 3, "one node won the race:\n%s", stdout)
	require.NotEqual(t, won[1], won[2])
	for _, want := range []string{
		"every agent sees it schedulable, with the plugin healthy on 3 nodes",
		"killed " + won[1],
		"n1 counts the plugin on 2 nodes once " + won[1] + "'s lease ran out, and the claim of web-" + won[1] + " stays",
		"refused, as it must be", "already has a writer (alloc web-" + won[1] + ")",
		"the GC freed the claim of web-" + won[1] + " once " + won[1] + " was down past its grace",
		"n1 and " + won[2] + " agree: web-" + won[2] + " is now the one writer",
		"[5/5]", "All stopped cleanly",
	} {
		require.Contains(t, stdout, want)
	}
	require.False(t, strings.Contains(stdout, "two writers"))
	for _, pid := range regexp.MustCompile(`\(pid (\d+)\)`).FindAllStringSubmatch(stdout, -1) {
		n, err := strconv.Atoi(pid[1])
		require.NoError(t, err)
		require.ErrorIs(t, syscall.Kill(n, 0), syscall.ESRCH, "process %d still runs", n)
	}
}
