package volumes_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/messages"
)

// TestADrainForceTakesDownTheDrainedNodesMountAtOnce mounts a writer of
// the single-node-writer volume on n1, then drains n1 from n2 with
// -force, which frees n1's claims, and mounts the volume for a writer on
// n2. n1 takes its publish down as soon as its watch sees its claim go,
// with no restart: before, both targets stayed mounted read-write for as
// long as n1 ran.
func TestADrainForceTakesDownTheDrainedNodesMountAtOnce(t *testing.T) {
	l := newLifecycle(t)
	n1, n2 := l.nodes[0], l.nodes[1]
	_, err := n1.manager.Mount(ctx, "", "sw", "n1-a1", false)
	require.NoError(t, err)

	_, err = n2.store.Drain(ctx, "n1")
	require.NoError(t, err)
	freed, err := n2.store.FreeNodeClaims(ctx, "n1")
	require.NoError(t, err)
	require.Len(t, freed, 1)
	_, err = n2.store.Undrain(ctx, "n1")
	require.NoError(t, err)

	rapidChecks(t, 1) // one run: rapid.T for the lifecycle's helpers
	rapid.Check(t, func(rt *rapid.T) {
		n1.waitFor(rt, "its mount taken down", func(*messages.VolumePublish) bool { return false })
		require.NoError(rt, mountUnfenced(n2, "sw", "n2-a1"))
		l.model = fleetModel{mounted: map[fleetKey]bool{{"n2", "sw", "n2-a1"}: false}, byMount: map[fleetKey]bool{{"n2", "sw", "n2-a1"}: true}}
		l.check(rt)
		require.NoError(rt, n2.manager.Unmount(ctx, "", "sw", "n2-a1"))
	})
}

// TestARestoreOfEtcdTakesDownAMountWhoseClaimItForgot mounts a writer on
// n1 after a snapshot of etcd was taken, then restores etcd from that
// snapshot while n1 runs (as plugvisor's restore does it, and as a plain
// restore whose revision goes back): the restored etcd holds no claim of
// n1's, so n1 takes its publish down, and n3 mounts the volume alone.
// Before, n1's standing stayed held and its mount was never checked: two
// writers.
func TestARestoreOfEtcdTakesDownAMountWhoseClaimItForgot(t *testing.T) {
	for _, bump := range []bool{true, false} {
		t.Run(map[bool]string{true: "bumped", false: "revision back"}[bump], func(t *testing.T) {
			l := newLifecycle(t)
			n1, n3 := l.nodes[0], l.nodes[2]
			snap := filepath.Join(t.TempDir(), "fleet.db")
			_, err := fleet.SaveSnapshot(ctx, fleet.Access{Endpoints: l.srv.Endpoints()}, snap)
			require.NoError(t, err)
			_, err = n1.manager.Mount(ctx, "", "sw", "n1-a1", false)
			require.NoError(t, err)

			l.srv.RestoreFrom(snap, bump)
			rapidChecks(t, 1)
			rapid.Check(t, func(rt *rapid.T) {
				n1.waitFor(rt, "its mount taken down", func(*messages.VolumePublish) bool { return false })
				require.NoError(rt, mountUnfenced(n3, "sw", "n3-a1"))
				l.model = fleetModel{mounted: map[fleetKey]bool{{"n3", "sw", "n3-a1"}: false}, byMount: map[fleetKey]bool{{"n3", "sw", "n3-a1"}: true}}
				l.check(rt)
				require.NoError(rt, n3.manager.Unmount(ctx, "", "sw", "n3-a1"))
			})
		})
	}
}

// mountUnfenced mounts vol for a writer alloc on n, trying again while n's
// lease is at risk (a restart of etcd, on a loaded machine, makes it so
// for a moment: the mount is refused as fenced, and may be sent again).
func mountUnfenced(n *lifecycleNode, vol, alloc string) error {
	deadline := time.Now().Add(wait)
	for {
		_, err := n.manager.Mount(ctx, "", vol, alloc, false)
		if !errors.Is(err, volumes.ErrFenced) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
