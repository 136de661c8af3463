package volumes_test

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

// fenceEvents records what a volume manager's OnEvent heard.
type fenceEvents struct {
	mu     sync.Mutex
	events []volumes.Event
}

func (e *fenceEvents) add(ev volumes.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, ev)
}

// kinds are the kinds heard for alloc, in order.
func (e *fenceEvents) kinds(alloc string) []volumes.EventKind {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []volumes.EventKind
	for _, ev := range e.events {
		if ev.AllocID == alloc {
			out = append(out, ev.Kind)
		}
	}
	return out
}

// partitionedFleet is n2, which dials etcd through a proxy the test cuts
// and whose volume manager follows its lease's standing, and n3, which
// dials etcd directly; both run the plain hostpath plugin on one shared
// storage root, and the single-node-writer volume "db" is registered.
type partitionedFleet struct {
	srv    *etcdtest.Server
	proxy  *etcdtest.Proxy
	n2, n3 *fleetNode
	heard  *fenceEvents
	watch  func()
}

func newPartitionedFleet(t *testing.T) *partitionedFleet {
	srv := etcdtest.Start(t)
	f := &partitionedFleet{srv: srv, proxy: srv.Proxy(t), heard: &fenceEvents{}}
	f.n2 = newFleetNodeAt(t, f.proxy.Endpoints(), "n2", func(c *volumes.Config) { c.OnEvent = f.heard.add })
	f.n3 = newFleetNode(t, srv, "n3")
	root := filepath.Join(hostpathtest.TempDir(t), "storage")
	for id, n := range map[string]*fleetNode{"n2": f.n2, "n3": f.n3} {
		p := hostpathtest.Serve(t, hostpath.Config{Name: "hostpath", NodeID: id, Root: root})
		n.register(volumes.NodePluginType, "hp", "a1", p.Endpoint)
		n.register(volumes.ControllerPluginType, "hp", "a1", p.Endpoint)
		if n == f.n3 {
			createSingleWriter(t, n, p.Endpoint, "db")
		}
	}
	f.follow(t)
	return f
}

// follow makes n2's volume manager follow its lease's standing, as the
// agent does, until the test ends or stopFollowing.
func (f *partitionedFleet) follow(t *testing.T) {
	f.watch = f.n2.store.WatchStanding(f.n2.manager.SetStanding)
	t.Cleanup(f.stopFollowing)
}

func (f *partitionedFleet) stopFollowing() { f.watch() }

// freeN2 runs the fleet's GC from n3 until it has freed n2's claims, n2's
// lease having expired in etcd (the grace is tiny: the fence is what is
// tested, not the GC).
func (f *partitionedFleet) freeN2(t *testing.T) {
	gc, err := fleet.StartGC(f.n3.store, fleet.GCConfig{Grace: time.Nanosecond})
	require.NoError(t, err)
	defer gc.Stop()
	require.Eventually(t, func() bool {
		freed, err := gc.Step(ctx, time.Now())
		return err == nil && slices.ContainsFunc(freed, func(fr fleet.Freed) bool { return fr.NodeID == "n2" })
	}, wait, 20*time.Millisecond, "the GC never freed n2's claims")
}

// writable reports whether a file can be created in dir.
func writable(dir string) error {
	f, err := os.CreateTemp(dir, "probe")
	if err != nil {
		return err
	}
	_ = f.Close()
	return os.Remove(f.Name())
}

// TestANodeCutFromEtcdFencesItsWriterAndTakesItDownOnceTheFleetGaveTheVolumeAway
// is the partition of issue 22: a writer on n2, n2 cut from etcd (not
// killed), the GC frees its claim, n3 claims and mounts the volume, and n2
// comes back. n2's writer turns read-only once its lease may be lost, long
// before the GC could free its claim, its new mounts are refused, and
// once it is back it takes the mount down rather than keep it: at no point
// are there two writable mounts.
func TestANodeCutFromEtcdFencesItsWriterAndTakesItDownOnceTheFleetGaveTheVolumeAway(t *testing.T) {
	f := newPartitionedFleet(t)
	res, err := f.n2.manager.Mount(ctx, "", "db", "a2", false)
	require.NoError(t, err)
	require.NoError(t, writable(res.TargetPath))

	f.proxy.Cut()
	require.Eventually(t, func() bool { return errors.Is(writable(res.TargetPath), unix.EROFS) }, wait, 10*time.Millisecond,
		"n2's writer stayed writable with its lease lost")
	require.NotEmpty(t, res.StagingPath)
	require.Eventually(t, func() bool { return errors.Is(writable(res.StagingPath), unix.EROFS) }, wait, 10*time.Millisecond,
		"n2's staging path, of which the writer's target is a bind mount, stayed writable with its lease lost")
	_, err = f.n2.manager.Mount(ctx, "", "db", "a2b", true)
	require.ErrorIs(t, err, volumes.ErrFenced)
	require.Eventually(t, func() bool { return f.n2.status("db").Record.GetPublishes()["a2"].GetFence() != "" }, wait, 10*time.Millisecond)
	require.Equal(t, []volumes.EventKind{volumes.EventClaimAtRisk, volumes.EventClaimLost}, f.heard.kinds("a2"))

	f.freeN2(t)
	theirs, err := f.n3.manager.Mount(ctx, "", "db", "a3", false)
	require.NoError(t, err)
	require.NoError(t, writable(theirs.TargetPath))
	require.ErrorIs(t, writable(res.TargetPath), unix.EROFS, "two writable mounts of a single-node-writer volume")

	f.proxy.Heal()
	require.Eventually(t, func() bool { return len(f.n2.status("db").Record.GetPublishes()) == 0 }, wait, 10*time.Millisecond,
		"n2 kept a mount whose claim the fleet gave away")
	require.Empty(t, mountsUnder(t, f.n2.root))
	require.Equal(t, []volumes.EventKind{volumes.EventClaimAtRisk, volumes.EventClaimLost, volumes.EventClaimGone}, f.heard.kinds("a2"))
	require.NoError(t, writable(theirs.TargetPath))
	v, err := f.n3.store.GetVolume(ctx, "", "db")
	require.NoError(t, err)
	require.Equal(t, []string{"a3"}, slices.Sorted(maps.Keys(v.WriteClaims)), "n2's way out released a claim that was not its own")

	_, err = f.n2.manager.Mount(ctx, "", "db", "a2", false)
	require.ErrorIs(t, err, volumes.ErrClaimRefused, "n2 mounts again once its lease is held, under the fleet's rules")
}

// TestAFencedWriterIsWritableAgainWhenItsClaimOutlivedTheCut: a cut
// shorter than the GC's grace fences the writer and its staging path, and
// the node, back, finds its claim still its own and makes both writable
// again.
func TestAFencedWriterIsWritableAgainWhenItsClaimOutlivedTheCut(t *testing.T) {
	f := newPartitionedFleet(t)
	res, err := f.n2.manager.Mount(ctx, "", "db", "a2", false)
	require.NoError(t, err)

	f.proxy.Cut()
	require.Eventually(t, func() bool { return errors.Is(writable(res.TargetPath), unix.EROFS) }, wait, 10*time.Millisecond)
	require.Eventually(t, func() bool { return errors.Is(writable(res.StagingPath), unix.EROFS) }, wait, 10*time.Millisecond)
	require.Eventually(t, func() bool { return f.n2.status("db").Record.GetStage().GetFenced() }, wait, 10*time.Millisecond,
		"the record says the fence made the staging path read-only")
	f.proxy.Heal()
	require.Eventually(t, func() bool { return writable(res.TargetPath) == nil }, wait, 10*time.Millisecond,
		"the writer stayed read-only although its claim is n2's")
	require.NoError(t, writable(res.StagingPath), "the staging path is writable again with its writer")
	require.Eventually(t, func() bool {
		return slices.Equal(f.heard.kinds("a2"), []volumes.EventKind{volumes.EventClaimAtRisk, volumes.EventClaimLost, volumes.EventClaimRestored})
	}, wait, 10*time.Millisecond, "heard %v", f.heard.kinds("a2"))
	st := f.n2.settle("db")
	require.Empty(t, st.Record.GetPublishes()["a2"].GetFence())
	require.False(t, st.Record.GetStage().GetFenced())
	require.NoError(t, f.n2.manager.Unmount(ctx, "", "db", "a2"))
}

// TestARestartedNodeTakesDownAMountWhoseClaimTheFleetGaveAway is the
// restart of issue 22: n2's agent is down (nothing fences) while its claim
// is freed and n3 mounts the volume; at its start, n2's reconcile checks
// the claims and takes its mount down instead of keeping it "published",
// and it never publishes again the target the kernel lost.
func TestARestartedNodeTakesDownAMountWhoseClaimTheFleetGaveAway(t *testing.T) {
	for _, lost := range []bool{false, true} {
		name := map[bool]string{false: "with its mount in place", true: "with its target lost by the kernel"}[lost]
		t.Run(name, func(t *testing.T) {
			f := newPartitionedFleet(t)
			f.stopFollowing() // the agent is down: nothing fences
			res, err := f.n2.manager.Mount(ctx, "", "db", "a2", false)
			require.NoError(t, err)
			f.n2.stop()
			f.proxy.Cut()
			f.freeN2(t)
			_, err = f.n3.manager.Mount(ctx, "", "db", "a3", false)
			require.NoError(t, err)
			if lost {
				require.NoError(t, unix.Unmount(res.TargetPath, 0))
			}
			f.proxy.Heal()
			require.Eventually(t, func() bool { return f.n2.store.Standing(time.Now()) == model.StandingHeld }, wait, 10*time.Millisecond)

			f.n2.start()
			st := f.n2.settle("db")
			require.Empty(t, st.Record.GetPublishes(), "n2 kept a mount whose claim the fleet gave away")
			require.Empty(t, mountsUnder(t, f.n2.root))
			require.Equal(t, []volumes.EventKind{volumes.EventClaimGone}, f.heard.kinds("a2"))
		})
	}
}
