package volumes_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"pgregory.net/rapid"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/messages"
)

// lifecycleNode is a node of a fleet (see newFleetNode) with the strict
// plugin "hp" of its own node ID, on the fleet's storage system, and the
// allocs that run there.
type lifecycleNode struct {
	*fleetNode
	id     string
	allocs []string
	plugin *strictPlugin
	proxy  *etcdtest.Proxy
	// sent, when set, is called with each ClaimsChanged once it is sent
	// to the node's manager.
	sent atomic.Pointer[func(model.NodeClaims)]
	// resynced, when set, is called with each Resync's reason once it is
	// sent to the node's manager.
	resynced atomic.Pointer[func(string)]
	// read, when set, is called once, with what it read, after the next
	// volume its manager reads from the catalog without an error, and
	// before the manager gets it.
	read *atomic.Pointer[func(*model.CSIVolume)]
}

// hookedCatalog is a volume manager's catalog whose next read calls a
// hook (lifecycleNode.read).
type hookedCatalog struct {
	volumes.Catalog
	read *atomic.Pointer[func(*model.CSIVolume)]
}

func (c hookedCatalog) GetVolume(ctx context.Context, namespace, id string) (*model.CSIVolume, error) {
	v, err := c.Catalog.GetVolume(ctx, namespace, id)
	if hook := c.read.Load(); err == nil && hook != nil && c.read.CompareAndSwap(hook, nil) {
		(*hook)(v)
	}
	return v, err
}

func newLifecycleNode(t *testing.T, srv *etcdtest.Server, storageSys *storageSystem, id string) *lifecycleNode {
	proxy := srv.Proxy(t)
	read := &atomic.Pointer[func(*model.CSIVolume)]{}
	n := newFleetNodeAt(t, proxy.Endpoints(), id, func(c *volumes.Config) { c.Catalog = hookedCatalog{Catalog: c.Catalog, read: read} })
	l := &lifecycleNode{fleetNode: n, id: id, allocs: []string{id + "-a1", id + "-a2"}, proxy: proxy, read: read,
		plugin: newStrictPluginOn(t, n.node, "hp", id, storageSys)}
	// The volume manager follows the node's standing, as the agent's does,
	// across its restarts.
	n.onStart = func(m *volumes.Manager) { m.SetStanding(n.store.Standing(time.Now())) }
	n.onStart(n.manager)
	stop := n.store.WatchStanding(func(s model.Standing) {
		if m := n.current.Load(); m != nil {
			m.SetStanding(s)
		}
	})
	t.Cleanup(stop)
	// And the fleet's claims, as the agent's does.
	stopWatch := n.store.WatchNode(fleet.NodeWatchConfig{
		Claims: func(c model.NodeClaims) {
			if m := n.current.Load(); m != nil {
				m.ClaimsChanged(c)
			}
			if sent := l.sent.Load(); sent != nil {
				(*sent)(c)
			}
		},
		Resync: func(why string) {
			if m := n.current.Load(); m != nil {
				m.Resync(why)
			}
			if resynced := l.resynced.Load(); resynced != nil {
				(*resynced)(why)
			}
		},
	})
	t.Cleanup(stopWatch)
	return l
}

// waitFor waits until every publish of the node satisfies ok, its queues
// idle and no publish being checked.
func (n *lifecycleNode) waitFor(rt *rapid.T, what string, ok func(*messages.VolumePublish) bool) {
	deadline := time.Now().Add(wait)
	for {
		done := true
		for _, vol := range []string{"mw", "ro", "sw"} {
			st, err := n.manager.Status(ctx, "", vol)
			if err != nil {
				rt.Fatalf("status on %s: %v", n.id, err)
			}
			for _, pub := range st.Record.GetPublishes() {
				done = done && ok(pub)
			}
			done = done && !st.Busy
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			rt.Fatalf("node %s: %s: not within %v", n.id, what, wait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// readOnly reports whether the mount at target is read-only.
func readOnly(target string) bool {
	var st unix.Statfs_t
	return unix.Statfs(target, &st) == nil && st.Flags&unix.ST_RDONLY != 0
}

// checkWritableMounts checks that every target under n's root that the
// kernel has mounted writable is a publish of n whose alloc holds a write
// claim on n in etcd: no writable mount without its claim.
func checkWritableMounts(rt *rapid.T, n *lifecycleNode, inFleet map[string]*model.CSIVolume) {
	owner := map[string]fleetKey{}
	for vol := range inFleet {
		st, err := n.manager.Status(ctx, "", vol)
		if err != nil {
			rt.Fatalf("status on %s: %v", n.id, err)
		}
		for alloc, pub := range st.Record.GetPublishes() {
			owner[pub.GetTargetPath()] = fleetKey{n.id, vol, alloc}
		}
	}
	for _, m := range mountsUnder(n.t, n.root) {
		if !strings.Contains(m, "/"+volumes.PerAllocDirName+"/") || readOnly(m) {
			continue
		}
		k, ok := owner[m]
		if !ok {
			rt.Fatalf("node %s: %s is mounted writable and no publish explains it", n.id, m)
		}
		if c := inFleet[k.volume].WriteClaims[k.alloc]; c == nil || c.NodeID != n.id {
			rt.Fatalf("node %s: %s (alloc %s, volume %s) is mounted writable without its write claim on %s in etcd", n.id, m, k.alloc, k.volume, n.id)
		}
	}
}

// fleetKey is one alloc's use of one volume on one node.
type fleetKey struct{ node, volume, alloc string }

// fleetModel is what the test expects: the mounts (read-only or not), and
// the claims, each taken by a mount (which releases it at the unmount) or
// by a claim (which a release frees).
type fleetModel struct {
	mounted map[fleetKey]bool
	byMount map[fleetKey]bool
}

// mountedOn is the model of node's mounts: volume → alloc → read-only.
func (m fleetModel) mountedOn(node string, vols []string) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, vol := range vols {
		out[vol] = map[string]bool{}
	}
	for k, ro := range m.mounted {
		if k.node == node {
			out[k.volume][k.alloc] = ro
		}
	}
	return out
}

// mount follows a mount of k, read-only or not, that returned err.
func (m fleetModel) mount(rt *rapid.T, k fleetKey, ro bool, err error) {
	if prev, ok := m.mounted[k]; ok && prev == ro && err != nil {
		rt.Fatalf("mounting again what is mounted: %v", err)
	}
	switch _, held := m.byMount[k]; {
	case err == nil:
		m.mounted[k] = ro
		if !held {
			m.byMount[k] = true
		}
	case errors.Is(err, volumes.ErrClaimRefused), errors.Is(err, volumes.ErrInUse), errors.Is(err, volumes.ErrFenced):
		// ErrFenced: a loaded machine renewed the node's lease late.
	default:
		rt.Fatalf("mount on %s: %v", k.node, err)
	}
}

// claim follows a claim of k that returned err.
func (m fleetModel) claim(rt *rapid.T, k fleetKey, err error) {
	switch _, held := m.byMount[k]; {
	case err == nil && !held:
		m.byMount[k] = false
	case err != nil && !errors.Is(err, volumes.ErrClaimRefused) && !errors.Is(err, volumes.ErrFenced):
		rt.Fatalf("claim: %v", err)
	}
}

// unmount follows an unmount of k that returned err.
func (m fleetModel) unmount(rt *rapid.T, k fleetKey, err error) {
	if _, ok := m.mounted[k]; !ok {
		if !errors.Is(err, volumes.ErrNotMounted) {
			rt.Fatalf("unmount without a mount: want ErrNotMounted, got %v", err)
		}
		return
	}
	if err != nil {
		rt.Fatalf("unmount of a mount on %s: %v", k.node, err)
	}
	delete(m.mounted, k)
	if m.byMount[k] {
		delete(m.byMount, k)
	}
}

// TestRandomLifecyclesOverThreeNodesKeepTheInvariants runs random sequences
// of claim, mount, unmount, release, volume manager restart and crash, an
// agent killed at any step of a mount or an unmount, and plugin restart on
// three nodes of a fleet that share one etcd and one storage system, and
// checks after every step, across the fleet, that a single-writer volume
// never has two writers (in etcd's claims and in the real publishes), that
// a single-node volume is claimed, attached, staged and published on one
// node at most, that the fleet's attachments, the nodes' records and the
// storage system's controller agree, that every mount has its claim in
// etcd on its node and every claim its mount or its claimer (no release
// stuck), that no mount the kernel has writable lacks its write claim in
// etcd on its node, and, on each node, what the one-node test checks. (An
// etcd restart takes seconds; fleet/outage_test.go covers it.)
func TestRandomLifecyclesOverThreeNodesKeepTheInvariants(t *testing.T) {
	l := newLifecycle(t)
	// Each run mounts for real on three nodes and restarts bbolt and the
	// plugins.
	rapidChecks(t, 20)
	rapid.Check(t, func(rt *rapid.T) { l.run(rt, nil, nil) })
	l.finish(t)
}

// lifecycle is the fleet of the lifecycle tests: three nodes, each dialling
// etcd through a proxy that a partition cuts, and each volume manager
// following its node's standing as the agent's does; and the model of the
// run under way.
type lifecycle struct {
	t          *testing.T
	srv        *etcdtest.Server
	storageSys *storageSystem
	nodes      []*lifecycleNode
	vols       []string
	external   map[string]string
	model      fleetModel
	// cut is the node cut from etcd, nil when none is.
	cut *lifecycleNode
	// partitions and freed count the partitions and those where the GC
	// freed the cut node's claims, and fenced the writers they fenced.
	partitions, freed, fenced int
}

func newLifecycle(t *testing.T) *lifecycle {
	l := &lifecycle{t: t, srv: etcdtest.Start(t), storageSys: newStorageSystem(t), external: map[string]string{}}
	for _, id := range []string{"n1", "n2", "n3"} {
		l.nodes = append(l.nodes, newLifecycleNode(t, l.srv, l.storageSys, id))
	}
	access := map[string]model.AccessMode{
		"sw": model.AccessModeSingleNodeWriter, "ro": model.AccessModeSingleNodeReader, "mw": model.AccessModeMultiNodeMultiWriter,
	}
	l.vols = slices.Sorted(maps.Keys(access))
	for _, vol := range l.vols {
		l.external[vol] = l.nodes[0].plugin.createVolume(vol)
		v := model.NewCSIVolume(vol, 0)
		v.Namespace, v.PluginID, v.ExternalID = model.DefaultNamespace, "hp", l.external[vol]
		v.AccessMode, v.AttachmentMode = access[vol], model.AttachmentModeFileSystem
		_, err := l.nodes[0].store.RegisterVolume(ctx, v)
		require.NoError(t, err)
	}
	return l
}

// pick draws a node and one of its allocs' use of a volume.
func (l *lifecycle) pick(rt *rapid.T) (*lifecycleNode, fleetKey) {
	n := rapid.SampledFrom(l.nodes).Draw(rt, "node")
	return n, fleetKey{n.id, rapid.SampledFrom(l.vols).Draw(rt, "volume"), rapid.SampledFrom(n.allocs).Draw(rt, "alloc")}
}

// run is one run: random steps (with extra ones), each followed by the
// checks, then everything cleaned up and checked left behind by nobody.
func (l *lifecycle) run(rt *rapid.T, extra map[string]func(*rapid.T), last func(*rapid.T)) {
	for _, n := range l.nodes {
		clean(rt, n.node, l.vols, n.allocs) // a failed run may leave some behind while rapid shrinks
	}
	l.model = fleetModel{mounted: map[fleetKey]bool{}, byMount: map[fleetKey]bool{}}
	steps := map[string]func(*rapid.T){
		"claim":                                  l.claim,
		"mount":                                  l.mount,
		"unmount":                                l.unmount,
		"kill an agent in a mount or an unmount": l.kill,
		"release":                                l.release,
		"restart a volume manager":               func(rt *rapid.T) { rapid.SampledFrom(l.nodes).Draw(rt, "node").restart() },
		"crash a volume manager":                 func(rt *rapid.T) { rapid.SampledFrom(l.nodes).Draw(rt, "node").crash(nil) },
		"restart a plugin":                       func(rt *rapid.T) { rapid.SampledFrom(l.nodes).Draw(rt, "node").plugin.restart() },
		"":                                       l.check,
	}
	maps.Copy(steps, extra)
	rt.Repeat(steps)
	if last != nil {
		last(rt)
		l.check(rt)
	}
	for _, n := range l.nodes {
		clean(rt, n.node, l.vols, n.allocs)
	}
	checkFleet(rt, l.nodes, fleetVolumes(rt, l.nodes[0], l.vols), l.external, fleetModel{})
	for _, n := range l.nodes {
		_, published, violations := n.plugin.state()
		if len(published)+len(violations) > 0 || len(mountsUnder(l.t, n.root)) > 0 {
			rt.Fatalf("left behind on %s: published %v, violations %v, mounts %v", n.id, published, violations, mountsUnder(l.t, n.root))
		}
	}
	if attached := l.storageSys.volumes(); len(attached) > 0 {
		rt.Fatalf("left attached: %v", attached)
	}
}

// finish checks that the test left no mount behind.
func (l *lifecycle) finish(t *testing.T) {
	for _, n := range l.nodes {
		require.Empty(t, mountsUnder(t, n.root))
	}
}

// reader is a node that reaches etcd.
func (l *lifecycle) reader() *lifecycleNode {
	if l.nodes[0] == l.cut {
		return l.nodes[1]
	}
	return l.nodes[0]
}

// check runs the checks of a step.
func (l *lifecycle) check(rt *rapid.T) {
	inFleet := fleetVolumes(rt, l.reader(), l.vols)
	for _, n := range l.nodes {
		checkNode(rt, n.node, n.plugin, l.model.mountedOn(n.id, l.vols), claimsOn(inFleet, n.id))
		checkWritableMounts(rt, n, inFleet)
	}
	checkFleet(rt, l.nodes, inFleet, l.external, l.model)
}

func (l *lifecycle) claim(rt *rapid.T) {
	n, k := l.pick(rt)
	err := n.manager.Claim(ctx, "", k.volume, k.alloc, rapid.Bool().Draw(rt, "read_only"))
	l.model.claim(rt, k, err)
}

func (l *lifecycle) mount(rt *rapid.T) {
	n, k := l.pick(rt)
	ro := rapid.Bool().Draw(rt, "read_only")
	_, err := n.manager.Mount(ctx, "", k.volume, k.alloc, ro)
	l.model.mount(rt, k, ro, err)
}

func (l *lifecycle) unmount(rt *rapid.T) {
	n, k := l.pick(rt)
	l.model.unmount(rt, k, n.manager.Unmount(ctx, "", k.volume, k.alloc))
}

func (l *lifecycle) release(rt *rapid.T) {
	n, k := l.pick(rt)
	err := n.manager.Release(ctx, "", k.volume, k.alloc)
	_, ok := l.model.mounted[k]
	if ok != errors.Is(err, volumes.ErrInUse) || (!ok && err != nil) {
		rt.Fatalf("release (mounted %t): %v", ok, err)
	}
	if !ok {
		delete(l.model.byMount, k)
	}
}

func (l *lifecycle) kill(rt *rapid.T) {
	n, k := l.pick(rt)
	ro, mounted := l.model.mounted[k]
	steps := []string{"ControllerPublishVolume", "NodeStageVolume", "NodePublishVolume"}
	if mounted {
		steps = []string{"NodeUnpublishVolume", "NodeUnstageVolume", "ControllerUnpublishVolume"}
	} else {
		ro = rapid.Bool().Draw(rt, "read_only")
	}
	f := n.plugin.hang(rapid.SampledFrom(steps).Draw(rt, "step"), rapid.Bool().Draw(rt, "after"))
	done := make(chan error, 1)
	go func() {
		if mounted {
			done <- n.manager.Unmount(ctx, "", k.volume, k.alloc)
			return
		}
		_, err := n.manager.Mount(ctx, "", k.volume, k.alloc, ro)
		done <- err
	}()
	select {
	case <-f.reached:
		n.crash(f.free)
		<-done
		for _, vol := range l.vols {
			n.settle(vol)
		}
		// The reconcile at start rolled back the mount, or finished the unmount.
		delete(l.model.mounted, k)
		if l.model.byMount[k] {
			delete(l.model.byMount, k)
		}
	case err := <-done: // it did not come to that step
		n.plugin.unhang(f)
		if mounted {
			l.model.unmount(rt, k, err)
		} else {
			l.model.mount(rt, k, ro, err)
		}
	}
}

// fleetVolumes reads vols from etcd, through n's store.
func fleetVolumes(rt *rapid.T, n *lifecycleNode, vols []string) map[string]*model.CSIVolume {
	read, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	out := map[string]*model.CSIVolume{}
	for _, vol := range vols {
		v, err := n.store.GetVolume(read, "", vol)
		if err != nil {
			rt.Fatalf("volume %s in the fleet: %v", vol, err)
		}
		out[vol] = v
	}
	return out
}

// claimsOn is what the fleet holds of node's claims: for each volume, its
// allocs holding a write claim, and those holding a read claim, on node.
func claimsOn(inFleet map[string]*model.CSIVolume, node string) func(vol string) (writers, readers []string) {
	on := func(claims map[string]*model.Claim) []string {
		var allocs []string
		for alloc, c := range claims {
			if c.NodeID == node {
				allocs = append(allocs, alloc)
			}
		}
		slices.Sort(allocs)
		return allocs
	}
	return func(vol string) ([]string, []string) {
		return on(inFleet[vol].WriteClaims), on(inFleet[vol].ReadClaims)
	}
}

// checkFleet checks the fleet against the model after a step: etcd's
// claims against the model's, and the single-writer and single-node rules
// against etcd's claims, the nodes' records, the plugins' publishes and
// the storage system's attachments.
func checkFleet(rt *rapid.T, nodes []*lifecycleNode, inFleet map[string]*model.CSIVolume, external map[string]string, fm fleetModel) {
	for vol, v := range inFleet {
		if len(v.PastClaims) > 0 {
			rt.Fatalf("volume %s: releases stuck in the fleet: %v", vol, v.PastClaims)
		}
		held := map[fleetKey]bool{}
		claimNodes := map[string]bool{}
		for _, claims := range []map[string]*model.Claim{v.WriteClaims, v.ReadClaims} {
			for alloc, c := range claims {
				k := fleetKey{c.NodeID, vol, alloc}
				if _, ok := fm.byMount[k]; !ok {
					rt.Fatalf("volume %s: alloc %s holds a claim on %s that neither a mount nor a claim of the model made", vol, alloc, c.NodeID)
				}
				held[k], claimNodes[c.NodeID] = true, true
			}
		}
		for k := range fm.byMount {
			if k.volume == vol && !held[k] {
				rt.Fatalf("volume %s: the claim of alloc %s on %s is not in the fleet", vol, k.alloc, k.node)
			}
		}
		single := v.AccessMode == model.AccessModeSingleNodeWriter || v.AccessMode == model.AccessModeSingleNodeReader
		if single && len(v.WriteClaims) > 1 {
			rt.Fatalf("volume %s: two writers in the fleet: %v", vol, slices.Sorted(maps.Keys(v.WriteClaims)))
		}
		if single && len(claimNodes) > 1 {
			rt.Fatalf("volume %s: claimed on nodes %v", vol, slices.Sorted(maps.Keys(claimNodes)))
		}
		checkFleetUse(rt, nodes, v, external[vol], single)
	}
}

// checkFleetUse checks where v is attached, staged and published: a
// single-node volume on one node at most, with one read-write publish at
// most; and the storage system attaches it to exactly the nodes whose
// records say it is attached, which the fleet's attachments say too.
func checkFleetUse(rt *rapid.T, nodes []*lifecycleNode, v *model.CSIVolume, external string, single bool) {
	vol := v.ID
	var using []string
	writers := 0
	attachedTo := nodes[0].plugin.storage.nodes(external)
	var inFleet []string
	for node, a := range v.Attachments {
		if a.State != model.AttachmentStateAttached || a.ExternalNodeID != node {
			rt.Fatalf("volume %s: the fleet's attachment to %s is %+v", vol, node, *a)
		}
		inFleet = append(inFleet, node)
	}
	if slices.Sort(inFleet); !slices.Equal(inFleet, attachedTo) {
		rt.Fatalf("volume %s: the fleet has it attached to %v, the storage system to %v", vol, inFleet, attachedTo)
	}
	for _, n := range nodes {
		st, err := n.manager.Status(ctx, "", vol)
		if err != nil {
			rt.Fatalf("status on %s: %v", n.id, err)
		}
		rec := st.Record
		for _, pub := range rec.GetPublishes() {
			if !pub.GetReadOnly() {
				writers++
			}
		}
		n.plugin.mu.Lock()
		published := len(n.plugin.published[external])
		n.plugin.mu.Unlock()
		if rec.GetStage() != nil || len(rec.GetPublishes()) > 0 || published > 0 {
			using = append(using, n.id)
		}
		a := rec.GetAttachment()
		if a != nil && a.GetState() != "attached" {
			rt.Fatalf("volume %s on %s: attachment left %s (%s)", vol, n.id, a.GetState(), a.GetLastError())
		}
		if (a != nil) != slices.Contains(attachedTo, n.id) {
			rt.Fatalf("volume %s on %s: the record's attachment is %v, the storage system attaches it to %v", vol, n.id, a, attachedTo)
		}
	}
	if single && len(using) > 1 {
		rt.Fatalf("single-node volume %s is staged or published on %s", vol, strings.Join(using, ", "))
	}
	if vol == "sw" && writers > 1 {
		rt.Fatalf("single-node-writer volume %s has %d read-write publishes across the fleet", vol, writers)
	}
}
