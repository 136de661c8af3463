package volumes_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/messages"
)

// TestRandomLifecyclesWithPartitionsKeepEveryWriterClaimed adds to the
// steps of TestRandomLifecyclesOverThreeNodesKeepTheInvariants
// (fleet_property_test.go) a partition: a node cut from etcd (not killed)
// while it keeps its mounts, then, or not, the GC freeing its claims and
// another node claiming a volume, then the node coming back. Within the
// fence's bound (a lease TTL), the cut node's writers are read-only; after
// every step no mount the kernel has writable lacks its write claim in
// etcd on its node; once back, the node has taken down every mount whose
// claim was freed, and made writable again every one whose claim held.
func TestRandomLifecyclesWithPartitionsKeepEveryWriterClaimed(t *testing.T) {
	l := newLifecycle(t)
	// A partition waits out a lease TTL and the GC: few runs.
	rapidChecks(t, 3)
	// Each run ends with a partition whose claims the GC frees, so that
	// every run has one, whatever the steps drawn before.
	rapid.Check(t, func(rt *rapid.T) {
		l.run(rt, map[string]func(*rapid.T){"partition a node": l.partition}, func(rt *rapid.T) { l.partitionFreed(rt, true) })
	})
	l.finish(t)
	t.Logf("%d partitions, %d with the cut node's claims freed, %d writers fenced", l.partitions, l.freed, l.fenced)
	require.NotZero(t, l.freed, "no run freed a cut node's claims: the test tested nothing")
}

// partition mounts a writer on a node where the claims allow it, cuts the
// node from etcd and waits for the fence's bound: its
// writers read-only. Then, or not, the GC (run from another node) frees
// its claims once etcd counts it down, and another node claims a volume.
// Then the node comes back, and the test waits until it has checked its
// mounts against the fleet's claims.
func (l *lifecycle) partition(rt *rapid.T) {
	l.partitionFreed(rt, rapid.Bool().Draw(rt, "GC frees its claims"))
}

// partitionFreed is partition, the GC freeing the cut node's claims or not.
func (l *lifecycle) partitionFreed(rt *rapid.T, free bool) {
	n, k := l.pick(rt)
	_, err := n.manager.Mount(ctx, "", k.volume, k.alloc, false) // a writer to fence, where the claims allow it
	l.model.mount(rt, k, false, err)
	l.cut = n
	defer func() { l.cut = nil }()
	n.proxy.Cut()
	n.waitFor(rt, "its writers read-only", func(pub *messages.VolumePublish) bool { return pub.GetReadOnly() || readOnly(pub.GetTargetPath()) })
	l.partitions++
	for k, ro := range l.model.mounted {
		if k.node == n.id && !ro {
			l.fenced++
		}
	}
	l.check(rt)
	if free {
		l.freed++
		other := rapid.SampledFrom(slices.DeleteFunc(slices.Clone(l.nodes), func(o *lifecycleNode) bool { return o == n })).Draw(rt, "other node")
		freeClaims(rt, other.store, n.id)
		for k := range l.model.byMount {
			if k.node == n.id {
				delete(l.model.byMount, k)
			}
		}
		_, k := l.pick(rt)
		k.node, k.alloc = other.id, rapid.SampledFrom(other.allocs).Draw(rt, "other alloc")
		l.model.claim(rt, k, other.manager.Claim(ctx, "", k.volume, k.alloc, rapid.Bool().Draw(rt, "read_only")))
		l.checkCut(rt, n)
	}
	n.proxy.Heal()
	l.cut = nil
	if free { // its mounts are taken down, their claims gone
		n.waitFor(rt, "its mounts taken down", func(*messages.VolumePublish) bool { return false })
		for k := range l.model.mounted {
			if k.node == n.id {
				delete(l.model.mounted, k)
			}
		}
		return
	}
	n.waitFor(rt, "its writers writable again", func(pub *messages.VolumePublish) bool {
		return pub.GetFence() == "" && (pub.GetReadOnly() || !readOnly(pub.GetTargetPath()))
	})
}

// checkCut checks the fleet while n is cut off and its claims freed: the
// other nodes as after any step, and n's mounts all read-only.
func (l *lifecycle) checkCut(rt *rapid.T, n *lifecycleNode) {
	inFleet := fleetVolumes(rt, l.reader(), l.vols)
	for _, o := range l.nodes {
		checkWritableMounts(rt, o, inFleet)
	}
}

// freeClaims runs the fleet's GC from store until it has freed every claim
// of node, whose lease etcd must have dropped (the grace is tiny: the
// fence is tested, not the GC).
func freeClaims(rt *rapid.T, store *fleet.Store, node string) {
	gc, err := fleet.StartGC(store, fleet.GCConfig{Grace: time.Nanosecond})
	if err != nil {
		rt.Fatalf("GC: %v", err)
	}
	defer gc.Stop()
	deadline := time.Now().Add(wait)
	for {
		up, err := store.NodeUp(ctx, node)
		if err == nil && !up {
			if _, err = gc.Step(ctx, time.Now()); err == nil {
				if _, err = gc.Step(ctx, time.Now()); err == nil {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			rt.Fatalf("the GC did not free the claims of %s: up %t, %v", node, up, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
