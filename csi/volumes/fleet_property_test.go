package volumes_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	catalog "github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

// lifecycleNode is a node of a fleet (see newFleetNode) with the strict
// plugin "hp" of its own node ID, on the fleet's storage system, and the
// allocs that run there.
type lifecycleNode struct {
	*fleetNode
	id     string
	allocs []string
	plugin *strictPlugin
}

func newLifecycleNode(t *testing.T, srv *etcdtest.Server, storageSys *storageSystem, id string) *lifecycleNode {
	n := newFleetNode(t, srv, id)
	return &lifecycleNode{fleetNode: n, id: id, allocs: []string{id + "-a1", id + "-a2"}, plugin: newStrictPluginOn(t, n.node, "hp", id, storageSys)}
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
	case errors.Is(err, volumes.ErrClaimRefused), errors.Is(err, volumes.ErrInUse):
	default:
		rt.Fatalf("mount on %s: %v", k.node, err)
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
// stuck), and, on each node, what the one-node test checks. (An etcd
// restart takes seconds; fleet/outage_test.go covers it.)
func TestRandomLifecyclesOverThreeNodesKeepTheInvariants(t *testing.T) {
	srv := etcdtest.Start(t)
	storageSys := newStorageSystem(t)
	var nodes []*lifecycleNode
	for _, id := range []string{"n1", "n2", "n3"} {
		nodes = append(nodes, newLifecycleNode(t, srv, storageSys, id))
	}
	access := map[string]catalog.AccessMode{
		"sw": catalog.AccessModeSingleNodeWriter, "ro": catalog.AccessModeSingleNodeReader, "mw": catalog.AccessModeMultiNodeMultiWriter,
	}
	vols := slices.Sorted(maps.Keys(access))
	external := map[string]string{}
	for _, vol := range vols {
		external[vol] = nodes[0].plugin.createVolume(vol)
		v := catalog.NewCSIVolume(vol, 0)
		v.Namespace, v.PluginID, v.ExternalID = catalog.DefaultNamespace, "hp", external[vol]
		v.AccessMode, v.AttachmentMode = access[vol], catalog.AttachmentModeFileSystem
		_, err := nodes[0].store.RegisterVolume(ctx, v)
		require.NoError(t, err)
	}
	// Each run mounts for real on three nodes and restarts bbolt and the
	// plugins.
	rapidChecks(t, 20)

	rapid.Check(t, func(rt *rapid.T) {
		for _, n := range nodes {
			clean(rt, n.node, vols, n.allocs) // a failed run may leave some behind while rapid shrinks
		}
		model := fleetModel{mounted: map[fleetKey]bool{}, byMount: map[fleetKey]bool{}}
		pick := func() (*lifecycleNode, fleetKey) {
			n := rapid.SampledFrom(nodes).Draw(rt, "node")
			return n, fleetKey{n.id, rapid.SampledFrom(vols).Draw(rt, "volume"), rapid.SampledFrom(n.allocs).Draw(rt, "alloc")}
		}
		rt.Repeat(map[string]func(*rapid.T){
			"claim": func(rt *rapid.T) {
				n, k := pick()
				err := n.manager.Claim(ctx, "", k.volume, k.alloc, rapid.Bool().Draw(rt, "read_only"))
				switch _, held := model.byMount[k]; {
				case err == nil && !held:
					model.byMount[k] = false
				case err != nil && !errors.Is(err, volumes.ErrClaimRefused):
					rt.Fatalf("claim: %v", err)
				}
			},
			"mount": func(rt *rapid.T) {
				n, k := pick()
				ro := rapid.Bool().Draw(rt, "read_only")
				_, err := n.manager.Mount(ctx, "", k.volume, k.alloc, ro)
				model.mount(rt, k, ro, err)
			},
			"unmount": func(rt *rapid.T) {
				n, k := pick()
				model.unmount(rt, k, n.manager.Unmount(ctx, "", k.volume, k.alloc))
			},
			"kill an agent in a mount or an unmount": func(rt *rapid.T) {
				n, k := pick()
				ro, mounted := model.mounted[k]
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
					for _, vol := range vols {
						n.settle(vol)
					}
					// The reconcile at start rolled back the mount, or finished the unmount.
					delete(model.mounted, k)
					if model.byMount[k] {
						delete(model.byMount, k)
					}
				case err := <-done: // it did not come to that step
					n.plugin.unhang(f)
					if mounted {
						model.unmount(rt, k, err)
					} else {
						model.mount(rt, k, ro, err)
					}
				}
			},
			"release": func(rt *rapid.T) {
				n, k := pick()
				err := n.manager.Release(ctx, "", k.volume, k.alloc)
				_, ok := model.mounted[k]
				if ok != errors.Is(err, volumes.ErrInUse) || (!ok && err != nil) {
					rt.Fatalf("release (mounted %t): %v", ok, err)
				}
				if !ok {
					delete(model.byMount, k)
				}
			},
			"restart a volume manager": func(rt *rapid.T) { rapid.SampledFrom(nodes).Draw(rt, "node").restart() },
			"crash a volume manager":   func(rt *rapid.T) { rapid.SampledFrom(nodes).Draw(rt, "node").crash(nil) },
			"restart a plugin":         func(rt *rapid.T) { rapid.SampledFrom(nodes).Draw(rt, "node").plugin.restart() },
			"": func(rt *rapid.T) {
				inFleet := fleetVolumes(rt, nodes[0], vols)
				for _, n := range nodes {
					checkNode(rt, n.node, n.plugin, model.mountedOn(n.id, vols), claimsOn(inFleet, n.id))
				}
				checkFleet(rt, nodes, inFleet, external, model)
			},
		})
		for _, n := range nodes {
			clean(rt, n.node, vols, n.allocs)
		}
		checkFleet(rt, nodes, fleetVolumes(rt, nodes[0], vols), external, fleetModel{})
		for _, n := range nodes {
			_, published, violations := n.plugin.state()
			if len(published)+len(violations) > 0 || len(mountsUnder(t, n.root)) > 0 {
				rt.Fatalf("left behind on %s: published %v, violations %v, mounts %v", n.id, published, violations, mountsUnder(t, n.root))
			}
		}
		if attached := storageSys.volumes(); len(attached) > 0 {
			rt.Fatalf("left attached: %v", attached)
		}
	})
	for _, n := range nodes {
		require.Empty(t, mountsUnder(t, n.root))
	}
}

// fleetVolumes reads vols from etcd, through n's store.
func fleetVolumes(rt *rapid.T, n *lifecycleNode, vols []string) map[string]*catalog.CSIVolume {
	read, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	out := map[string]*catalog.CSIVolume{}
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
func claimsOn(inFleet map[string]*catalog.CSIVolume, node string) func(vol string) (writers, readers []string) {
	on := func(claims map[string]*catalog.Claim) []string {
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
func checkFleet(rt *rapid.T, nodes []*lifecycleNode, inFleet map[string]*catalog.CSIVolume, external map[string]string, model fleetModel) {
	for vol, v := range inFleet {
		if len(v.PastClaims) > 0 {
			rt.Fatalf("volume %s: releases stuck in the fleet: %v", vol, v.PastClaims)
		}
		held := map[fleetKey]bool{}
		claimNodes := map[string]bool{}
		for _, claims := range []map[string]*catalog.Claim{v.WriteClaims, v.ReadClaims} {
			for alloc, c := range claims {
				k := fleetKey{c.NodeID, vol, alloc}
				if _, ok := model.byMount[k]; !ok {
					rt.Fatalf("volume %s: alloc %s holds a claim on %s that neither a mount nor a claim of the model made", vol, alloc, c.NodeID)
				}
				held[k], claimNodes[c.NodeID] = true, true
			}
		}
		for k := range model.byMount {
			if k.volume == vol && !held[k] {
				rt.Fatalf("volume %s: the claim of alloc %s on %s is not in the fleet", vol, k.alloc, k.node)
			}
		}
		single := v.AccessMode == catalog.AccessModeSingleNodeWriter || v.AccessMode == catalog.AccessModeSingleNodeReader
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
func checkFleetUse(rt *rapid.T, nodes []*lifecycleNode, v *catalog.CSIVolume, external string, single bool) {
	vol := v.ID
	var using []string
	writers := 0
	attachedTo := nodes[0].plugin.storage.nodes(external)
	var inFleet []string
	for node, a := range v.Attachments {
		if a.State != catalog.AttachmentStateAttached || a.ExternalNodeID != node {
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
