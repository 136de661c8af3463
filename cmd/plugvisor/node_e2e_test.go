package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/internal/racelog"
	"github.com/plugvisor/plugvisor/messages"
)

// fleetWithANode starts etcd, an agent n1 in cluster mode and, beside it,
// node n2 of the fleet (a fleet.Store of this test) holding the claim of
// alloc web-1 on volume db; it returns n1's data dir and n2.
func fleetWithANode(t *testing.T) (string, *fleet.Store) {
	t.Helper()
	srv := etcdtest.Start(t) // this process starts no protoactor remote: the agent runs in a child
	dir := dataDir(t)
	startAgent(t, dir, "-node-id", "n1", "-cluster-etcd", srv.Endpoints()[0], "-cluster-address", "127.0.0.1:0",
		"-cluster-insecure", "-cluster-lease-ttl", "2s")
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	n2, err := fleet.Open(ctx, fleet.Config{Endpoints: srv.Endpoints(), NodeID: "n2", LeaseTTL: fleet.MinLeaseTTL})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, n2.Close()) })
	require.NoError(t, n2.PutFingerprints(ctx, []*messages.CSIFingerprint{
		{Type: csi.TypeNode, Name: "hp", AllocId: "hp-n2", Healthy: true, NodeInfo: &messages.CSINodeInfo{NodeId: "csi-n2"}}}))
	v := model.NewCSIVolume("db", 0)
	v.PluginID, v.AccessMode, v.AttachmentMode = "hp", model.AccessModeMultiNodeMultiWriter, model.AttachmentModeFileSystem
	_, err = n2.RegisterVolume(ctx, v)
	require.NoError(t, err)
	require.NoError(t, claim(t, n2, "web-1"))
	return dir, n2
}

// claim claims volume db for alloc on n2.
func claim(t *testing.T, n2 *fleet.Store, alloc string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	_, err := n2.Claim(ctx, "", "db", &model.Claim{AllocID: alloc, NodeID: "n2", Mode: model.ClaimModeWrite, State: model.ClaimStateTaken})
	return err
}

// TestNodeDrainWaitsForTheClaimsToGoAndEligibilityEndsIt drains n2 from
// n1's CLI: node list shows it with its claim, the drain waits showing the
// claim left while n2's new claims are refused, finishes once the claim
// is released, and node eligibility -enable lets n2 claim again.
func TestNodeDrainWaitsForTheClaimsToGoAndEligibilityEndsIt(t *testing.T) {
	dir, n2 := fleetWithANode(t)
	out, stderr, code := cli(t, "node", "list", "-data-dir", dir)
	require.Zero(t, code, stderr)
	require.Regexp(t, `(?m)^n1\s+up\s+[0-9a-f]+ \(\d+s left\)\s+eligible\s+none\s+none$`, out)
	require.Regexp(t, `(?m)^n2\s+up\s+.*eligible\s+web-1 on default/db \(write\)`, out)
	out, stderr, code = cli(t, "volume", "list", "-data-dir", dir)
	require.Zero(t, code, stderr)
	require.Regexp(t, `(?m)^NAMESPACE.*SCHEDULABLE\s+CLAIMS$`, out)
	require.Regexp(t, `(?m)^default\s+db\s+hp\s+multi-node-multi-writer\s+true\s+1 writer$`, out)

	drain, output := startCLI(t, "node", "drain", "-data-dir", dir, "-deadline", "1m", "n2")
	require.Eventually(t, func() bool { return strings.Contains(output.String(), "claims left (1): web-1 on default/db (write)") },
		settle, 20*time.Millisecond, "the drain shows the claim left: %s", output)
	require.Contains(t, output.String(), "node n2 is draining: new claims on it are refused")
	require.ErrorIs(t, claim(t, n2, "web-2"), csi.ErrClaimRefused, "a draining node takes no new claim")
	// A second drain drains on: it waits for the same claim, here past a
	// short deadline of its own.
	out, stderr, code = cli(t, "node", "drain", "-data-dir", dir, "-deadline", "100ms", "n2")
	require.Equal(t, 1, code)
	require.Contains(t, out, "node n2 was draining already: new claims on it are refused")
	require.Contains(t, stderr, "the deadline of 100ms passed with claims left (1): web-1 on default/db (write)")

	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	_, err := n2.Release(ctx, "", "db", &model.Claim{AllocID: "web-1", State: model.ClaimStateReadyToFree})
	require.NoError(t, err)
	require.NoError(t, drain.Wait(), output.String())
	require.Contains(t, output.String(), "node n2 is drained: no claims left")

	out, stderr, code = cli(t, "node", "eligibility", "-data-dir", dir, "-enable", "n2")
	require.Zero(t, code, stderr)
	require.Equal(t, "node n2 is eligible: it takes new claims again\n", out)
	require.NoError(t, claim(t, n2, "web-2"))
}

// TestNodeDrainWithForceFreesTheClaimsLeftPastItsDeadline drains n2 with
// a short deadline: without -force it fails naming the claim left and the
// remedies, and the node stays draining; the remedy it names, the drain
// again with -force, frees the claim, the node still draining; a fresh
// drain with -force frees too.
func TestNodeDrainWithForceFreesTheClaimsLeftPastItsDeadline(t *testing.T) {
	dir, n2 := fleetWithANode(t)
	_, stderr, code := cli(t, "node", "drain", "-data-dir", dir, "-deadline", "100ms", "n2")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "the deadline of 100ms passed with claims left (1): web-1 on default/db (write); the node stays draining: run the drain again with -force")
	require.ErrorIs(t, claim(t, n2, "web-2"), csi.ErrClaimRefused, "the node stays draining")

	out, stderr, code := cli(t, "node", "drain", "-data-dir", dir, "-deadline", "100ms", "-force", "n2")
	require.Zero(t, code, stderr)
	require.Contains(t, out, "node n2 was draining already")
	require.Contains(t, out, "claims freed by force (1): web-1 on default/db")
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	v, err := n2.GetVolume(ctx, "", "db")
	require.NoError(t, err)
	require.Empty(t, v.Claimants())
	require.ErrorIs(t, claim(t, n2, "web-2"), csi.ErrClaimRefused, "the node is still draining")

	out, stderr, code = cli(t, "node", "eligibility", "-data-dir", dir, "-enable", "n2")
	require.Zero(t, code, stderr)
	require.Contains(t, out, "is eligible")
	require.NoError(t, claim(t, n2, "web-2"))
	out, stderr, code = cli(t, "node", "drain", "-data-dir", dir, "-deadline", "100ms", "-force", "n2")
	require.Zero(t, code, stderr)
	require.Contains(t, out, "node n2 is draining")
	require.Contains(t, out, "claims freed by force (1): web-2 on default/db")
}

// TestABadNodeDrainIsRefusedNamingTheFieldAndChangesNothing gives a drain
// an unknown node and deadlines that are not positive durations: each is
// refused with the field named, and the fleet's nodes stay eligible.
func TestABadNodeDrainIsRefusedNamingTheFieldAndChangesNothing(t *testing.T) {
	dir, _ := fleetWithANode(t)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"nope"}, 1, `node: the fleet knows no node "nope" (known: n1, n2)`},
		{[]string{"-deadline", "soon", "n2"}, 2, `invalid argument "soon" for "-deadline" flag`},
		{[]string{"-deadline", "-1m", "n2"}, 2, "-deadline is -1m0s: give a positive duration"},
		{[]string{}, 2, "NODE"},
	} {
		_, stderr, code := cli(t, append([]string{"node", "drain", "-data-dir", dir}, c.args...)...)
		require.Equal(t, c.code, code, "%v: %s", c.args, stderr)
		require.Contains(t, stderr, c.want, "%v", c.args)
	}
	_, stderr, code := cli(t, "node", "eligibility", "-data-dir", dir, "n2")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "give one of -enable or -disable")
	out, stderr, code := cli(t, "node", "list", "-data-dir", dir)
	require.Zero(t, code, stderr)
	require.NotContains(t, out, "draining", "nothing changed")
}

// startCLI starts a plugvisor command in the background; its stdout and
// stderr go to the buffer it returns.
func startCLI(t *testing.T, args ...string) (*exec.Cmd, *probe.LogBuffer) {
	t.Helper()
	output := &probe.LogBuffer{}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = output, output
	races := t.TempDir()
	cmd.Env = append(os.Environ(), racelog.Env(races))
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		checkRaces(t, races)
	})
	return cmd, output
}
