package volumes_test

import (
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
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

	freed, err := drainForce(n2.store, "n1")
	require.NoError(t, err)
	require.Len(t, freed, 1)

	l.takenDownThenMountedOn(t, n1, n2)
}

// TestAClaimFreedWhileItsMountIsOnTheWayInIsTakenDown frees n1's claim
// (drain -force) while n1's mount of the single writer is held in
// NodeStageVolume, its publish still being claimed, and only then lets
// the mount go on. Before, the claims change passed over a publish on its
// way in, the mount ended writable with no claim behind it, and n2's
// mount made two writers until n1's next full check. Then the mount was
// answered ok and taken down right after; now it is refused
// (ErrClaimRefused, naming the claim freed).
func TestAClaimFreedWhileItsMountIsOnTheWayInIsTakenDown(t *testing.T) {
	l := newLifecycle(t)
	n1, n2 := l.nodes[0], l.nodes[1]
	freed := n1.toldClaimGone("sw", "n1-a1")
	stage, mounted := mountHeldInStage(t, n1, "n1-a1")

	freed1, err := drainForce(n2.store, "n1")
	require.NoError(t, err)
	require.Len(t, freed1, 1, "the claim was taken before the stage")
	select {
	case <-freed:
	case <-time.After(wait):
		t.Fatal("n1's watch did not tell its manager that the claim went")
	}
	_, err = n1.manager.Status(ctx, "", "sw") // behind the claims change in the manager's mailbox
	require.NoError(t, err)
	n1.plugin.unhang(stage)
	mountRefusedAsFreed(t, mounted, "n1-a1", false)

	l.takenDownThenMountedOn(t, n1, n2)
}

// TestAMountWhoseClaimARestoreForgotWhileItRanIsRefused takes a snapshot
// of etcd, then holds n1's mount of the single writer in NodeStageVolume,
// its claim taken after the snapshot, and restores etcd from the snapshot
// (both ways). Once n1's manager has been told to check every mount, the
// mount goes on: it is refused, as the fleet no longer holds its claim
// (or as n1 fences, when the restore lost its lease too), where it was
// answered ok and taken down 7 ms later (a nemesis schedule
// found it: its checker saw an acknowledged mount lost). n3 then mounts
// the volume alone.
func TestAMountWhoseClaimARestoreForgotWhileItRanIsRefused(t *testing.T) {
	eachRestore(t, func(t *testing.T, l *lifecycle, snap string, bump bool) {
		n1, n3 := l.nodes[0], l.nodes[2]
		resynced := make(chan struct{})
		var once sync.Once
		told := func(string) { once.Do(func() { close(resynced) }) }
		stage, mounted := mountHeldInStage(t, n1, "n1-a1")

		n1.resynced.Store(&told)
		l.srv.RestoreFrom(snap, bump)
		select {
		case <-resynced:
		case <-time.After(wait):
			t.Fatal("n1's watch did not ask its manager to check every mount")
		}
		_, err := n1.manager.Status(ctx, "", "sw") // behind the resync in the manager's mailbox
		require.NoError(t, err)
		n1.plugin.unhang(stage)
		// The restored etcd may not hold n1's lease either (always when
		// its revision went back): its standing lost, n1 fences, and
		// refuses as such.
		mountRefusedAsFreed(t, mounted, "n1-a1", true)

		l.takenDownThenMountedOn(t, n1, n3)
	})
}

// mountHeldInStage starts a mount of the single writer "sw" for alloc on
// n and returns once the plugin holds it in NodeStageVolume, its claim
// taken: the fault that lets it go on (unhung at the test's end too), and
// the channel of the mount's answer.
func mountHeldInStage(t *testing.T, n *lifecycleNode, alloc string) (*fault, <-chan error) {
	t.Helper()
	stage := n.plugin.hold("NodeStageVolume")
	t.Cleanup(func() { n.plugin.unhang(stage) })
	mounted := make(chan error, 1)
	go func() {
		_, err := n.manager.Mount(ctx, "", "sw", alloc, false)
		mounted <- err
	}()
	select {
	case <-stage.reached:
	case <-time.After(wait):
		t.Fatal("the mount did not reach NodeStageVolume")
	}
	return stage, mounted
}

// mountRefusedAsFreed waits for the answer to alloc's mount on mounted:
// refused, its claim freed while it ran, or, when fenced may be, as its
// node fences.
func mountRefusedAsFreed(t *testing.T, mounted <-chan error, alloc string, fenced bool) {
	t.Helper()
	select {
	case err := <-mounted:
		if fenced && errors.Is(err, volumes.ErrFenced) {
			return
		}
		require.ErrorIs(t, err, volumes.ErrClaimRefused)
		require.ErrorContains(t, err, "the fleet freed alloc "+alloc+"'s claim on volume default/sw while it mounted")
	case <-time.After(wait):
		t.Fatal("the mount did not end")
	}
}

// TestAClaimFreedWhileAReconcileUnfencesIsNotMadeWritableAgain fences
// n1's writer with a short cut from etcd; on the heal, n1's reconcile
// reads the claim (still n1's), and right after that read the claim is
// freed (drain -force) and n1's manager told so. Before, the reconcile
// unfenced the target from what it had read: writable again, with the
// claim gone ("claim-restored"), until the next reconcile took it down.
// Now the unfence reads the claim again and takes the publish down.
func TestAClaimFreedWhileAReconcileUnfencesIsNotMadeWritableAgain(t *testing.T) {
	l := newLifecycle(t)
	n1, n2 := l.nodes[0], l.nodes[1]
	_, err := n1.manager.Mount(ctx, "", "sw", "n1-a1", false)
	require.NoError(t, err)
	events, cancel := n1.manager.SubscribeVolumeEvents()
	defer cancel()
	n1.proxy.Cut()
	require.Eventually(t, func() bool { return n1.status("sw").Record.GetPublishes()["n1-a1"].GetFence() != "" }, wait, 10*time.Millisecond)

	freed := n1.toldClaimGone("sw", "n1-a1")
	free := func(v *model.CSIVolume) {
		if v.WriteClaims["n1-a1"] == nil {
			t.Errorf("the reconcile read no claim of n1-a1: %v", v.WriteClaims)
		}
		// On the manager's job goroutine: no FailNow.
		_, err := drainForce(n2.store, "n1")
		assert.NoError(t, err)
		select {
		case <-freed:
		case <-time.After(wait):
			t.Error("n1's watch did not tell its manager that the claim went")
		}
	}
	n1.read.Store(&free)
	n1.proxy.Heal()

	l.takenDownThenMountedOn(t, n1, n2)
	require.Nil(t, n1.read.Load(), "the reconcile read the volume")
	for {
		select {
		case ev := <-events:
			require.NotEqual(t, volumes.EventClaimRestored, ev.Kind, "n1-a1 was made writable again: %+v", ev)
			continue
		default:
		}
		break
	}
}

// TestARestoreOfEtcdTakesDownAMountWhoseClaimItForgot mounts a writer on
// n1 after a snapshot of etcd was taken, then restores etcd from that
// snapshot while n1 runs (as plugvisor's restore does it, and as a plain
// restore whose revision goes back): the restored etcd holds no claim of
// n1's, so n1 takes its publish down, and n3 mounts the volume alone.
// Before, n1's standing stayed held and its mount was never checked: two
// writers.
func TestARestoreOfEtcdTakesDownAMountWhoseClaimItForgot(t *testing.T) {
	eachRestore(t, func(t *testing.T, l *lifecycle, snap string, bump bool) {
		n1, n3 := l.nodes[0], l.nodes[2]
		_, err := n1.manager.Mount(ctx, "", "sw", "n1-a1", false)
		require.NoError(t, err)

		l.srv.RestoreFrom(snap, bump)
		l.takenDownThenMountedOn(t, n1, n3)
	})
}

// eachRestore runs test on a new fleet whose etcd was just saved to the
// snapshot snap, once with a restore that bumps the revision (as
// plugvisor's does) and once with one whose revision goes back.
func eachRestore(t *testing.T, test func(t *testing.T, l *lifecycle, snap string, bump bool)) {
	for _, bump := range []bool{true, false} {
		t.Run(map[bool]string{true: "bumped", false: "revision back"}[bump], func(t *testing.T) {
			l := newLifecycle(t)
			snap := filepath.Join(t.TempDir(), "fleet.db")
			_, err := fleet.SaveSnapshot(ctx, fleet.Access{Endpoints: l.srv.Endpoints()}, snap)
			require.NoError(t, err)
			test(t, l, snap, bump)
		})
	}
}

// drainForce drains node from s and frees its claims, as `node drain
// -force` does, then makes it eligible again; it returns the claims freed.
func drainForce(s *fleet.Store, node string) ([]fleet.Freed, error) {
	if _, err := s.Drain(ctx, node); err != nil {
		return nil, err
	}
	freed, err := s.FreeNodeClaims(ctx, node)
	if err != nil {
		return nil, err
	}
	_, err = s.Undrain(ctx, node)
	return freed, err
}

// takenDownThenMountedOn checks, once n's claim of the single writer
// "sw" went, that n takes its publish down, and that other then mounts
// the volume as its one writer, the fleet checked after.
func (l *lifecycle) takenDownThenMountedOn(t *testing.T, n, other *lifecycleNode) {
	t.Helper()
	rapidChecks(t, 1) // one run: rapid.T for the lifecycle's helpers
	rapid.Check(t, func(rt *rapid.T) {
		n.waitFor(rt, "its mount taken down", func(*messages.VolumePublish) bool { return false })
		k := fleetKey{other.id, "sw", other.id + "-a1"}
		require.NoError(rt, mountUnfenced(other, k.volume, k.alloc))
		l.model = fleetModel{mounted: map[fleetKey]bool{k: false}, byMount: map[fleetKey]bool{k: true}}
		l.check(rt)
		require.NoError(rt, other.manager.Unmount(ctx, "", k.volume, k.alloc))
	})
}

// toldClaimGone is closed once n's manager has been sent a claims change
// of vol in which alloc holds no claim.
func (n *lifecycleNode) toldClaimGone(vol, alloc string) <-chan struct{} {
	gone := make(chan struct{})
	var once sync.Once
	seen := func(c model.NodeClaims) {
		if c.VolumeID == vol && c.Known && !c.Holds(alloc) {
			once.Do(func() { close(gone) })
		}
	}
	n.sent.Store(&seen)
	return gone
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
