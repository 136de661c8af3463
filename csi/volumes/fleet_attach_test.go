package volumes_test

import (
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi"
	csicatalog "github.com/plugvisor/plugvisor/csi/catalog"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/storage"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

// fleetNode is a node of a fleet: a volume manager whose catalog is a
// catalog actor in cluster mode over the node's own fleet.Store, wired as
// the agent wires them.
type fleetNode struct {
	*node
	store *fleet.Store
}

// newFleetNode opens node id's Store on srv (closed by the caller or
// the test) and starts its catalog and volume manager.
func newFleetNode(t *testing.T, srv *etcdtest.Server, id string) *fleetNode {
	t.Helper()
	return newFleetNodeAt(t, srv.Endpoints(), id, nil)
}

// newFleetNodeAt is newFleetNode dialling etcd at endpoints (through a
// proxy the test can cut), its volume manager's config changed by tune.
func newFleetNodeAt(t *testing.T, endpoints []string, id string, tune func(*volumes.Config)) *fleetNode {
	t.Helper()
	// A lease of 3 s: short, so that partitions are quick, and long enough
	// that a loaded machine renews it in time.
	store, err := fleet.Open(ctx, fleet.Config{Endpoints: endpoints, NodeID: id, LeaseTTL: 3 * time.Second, RequestTimeout: 5 * time.Second})
	require.NoError(t, err)
	system := probe.NewSystem(t)
	bucket, err := storage.NewMemory().Bucket(csicatalog.Bucket)
	require.NoError(t, err)
	cat, err := csicatalog.Start(system, csicatalog.Config{Bucket: bucket, NodeID: id, Fleet: store, Name: "catalog-" + id})
	require.NoError(t, err)
	n := newNode(t, func(c *volumes.Config) {
		c.Catalog, c.Attachments, c.NodeID = cat, store, id
		if tune != nil {
			tune(c)
		}
	})
	t.Cleanup(func() {
		n.stop()
		require.NoError(t, cat.Shutdown(ctx))
		_ = store.Close() // the test may have closed it: the node went down
	})
	// The plugin "hp" is healthy here, as the node's CSI manager would say.
	require.NoError(t, store.PutFingerprints(ctx, []*messages.CSIFingerprint{
		{Type: csi.TypeNode, Name: "hp", AllocId: "hp-" + id, Healthy: true, NodeInfo: &messages.CSINodeInfo{NodeId: id}},
		{Type: csi.TypeController, Name: "hp", AllocId: "hp-" + id, Healthy: true},
	}))
	return &fleetNode{node: n, store: store}
}

// TestADeadNodesAttachmentIsDetachedFromAnotherNode follows a volume whose
// node died with its detach unfinished (its controller was unreachable),
// as in Nomad's issue 8232: the fleet keeps the dead node's attachment,
// so another node that claims the volume is refused the attachment rather
// than attaching a single-node volume twice, and the error says how to
// detach it. An operator's detach from the other node is refused while
// the dead node is up or holds claims; once the fleet's GC has freed them,
// it detaches with the plugin node ID the fleet recorded, through the
// other node's controller, and the volume then mounts there.
func TestADeadNodesAttachmentIsDetachedFromAnotherNode(t *testing.T) {
	srv := etcdtest.Start(t)
	root := filepath.Join(hostpathtest.TempDir(t), "storage") // one storage system for both nodes
	n1, n2 := newFleetNode(t, srv, "n1"), newFleetNode(t, srv, "n2")
	plugin := func(node string, mode hostpath.Mode) *hostpathtest.Server {
		return hostpathtest.Serve(t, hostpath.Config{Name: "hostpath", NodeID: node, Root: root, Mode: mode, AttachRequired: true, SymlinkFallback: true})
	}
	n1Node, n1Controller, n2All := plugin("n1", hostpath.ModeNode), plugin("n1", hostpath.ModeController), plugin("n2", hostpath.ModeMonolith)
	n1.register(volumes.NodePluginType, "hp", "a1", n1Node.Endpoint)
	n1.register(volumes.ControllerPluginType, "hp", "a1", n1Controller.Endpoint)
	n2.register(volumes.NodePluginType, "hp", "a1", n2All.Endpoint)
	n2.register(volumes.ControllerPluginType, "hp", "a1", n2All.Endpoint)

	createSingleWriter(t, n2, n2All.Endpoint, "db")
	attachments := func() map[string]*model.Attachment {
		v, err := n2.store.GetVolume(ctx, "default", "db")
		require.NoError(t, err)
		return v.Attachments
	}

	_, err := n1.manager.Mount(ctx, "", "db", "web-1", false)
	require.NoError(t, err)
	require.Equal(t, map[string]*model.Attachment{"n1": {NodeID: "n1", ExternalNodeID: "n1", State: model.AttachmentStateAttached}},
		attachments(), "the fleet records the attachment with the plugin's node ID")

	err = n2.manager.Detach(ctx, "", "db", "n1")
	require.ErrorIs(t, err, volumes.ErrInUse)
	require.ErrorContains(t, err, "attached to node n1, which is up")

	// n1's controller becomes unreachable, and its unmount stops at the detach.
	n1Controller.Driver.Stop()
	require.Error(t, n1.manager.Unmount(ctx, "", "db", "web-1"))
	require.Contains(t, attachments(), "n1", "an attachment the controller did not undo stays in the fleet")

	// n1 dies: its lease goes.
	n1.stop()
	require.NoError(t, n1.store.Close())
	err = n2.manager.Detach(ctx, "", "db", "n1")
	require.ErrorIs(t, err, volumes.ErrInUse)
	require.ErrorContains(t, err, "allocs web-1 still hold claims")

	require.Equal(t, []fleet.Freed{{Namespace: "default", VolumeID: "db", AllocID: "web-1", NodeID: "n1"}}, gcPastTheGrace(t, n2.store))

	_, err = n2.manager.Mount(ctx, "", "db", "web-2", false)
	require.ErrorIs(t, err, volumes.ErrClaimRefused, "a single-node volume still attached to n1 is not attached to n2")
	require.ErrorContains(t, err, "is attached to node n1")
	require.ErrorContains(t, err, "plugvisor volume detach db n1", "the error says how to detach it")
	st := n2.settle("db")
	require.Nil(t, st.Record.GetAttachment(), "n2 sent nothing to the controller")
	got, err := n2.store.GetVolume(ctx, "default", "db")
	require.NoError(t, err)
	require.Empty(t, got.WriteClaims, "the refused mount gave its claim back")

	require.NoError(t, n2.manager.Detach(ctx, "", "db", "n1"))
	require.Empty(t, attachments(), "the dead node's attachment is gone from the fleet")

	// Nothing else writes to etcd now: the revisions count the writes.
	revision := func() uint64 {
		v, err := n2.store.GetVolume(ctx, "default", "db")
		require.NoError(t, err)
		return v.ModifyIndex
	}
	before := revision()
	res, err := n2.manager.Mount(ctx, "", "db", "web-2", false)
	require.NoError(t, err)
	require.DirExists(t, res.TargetPath)
	require.Equal(t, map[string]*model.Attachment{"n2": {NodeID: "n2", ExternalNodeID: "n2", State: model.AttachmentStateAttached}}, attachments())
	mounted := revision()
	require.Equal(t, uint64(3), mounted-before, "a mount writes etcd three times: the claim, the attachment before ControllerPublishVolume, and after")
	require.NoError(t, n2.manager.Unmount(ctx, "", "db", "web-2"))
	require.Empty(t, attachments(), "a detach on the node's own unmount leaves the fleet too")
	require.Equal(t, uint64(2), revision()-mounted, "an unmount writes etcd twice: the detach, then the release")
}

// TestADeadNodesAttachmentOfAVolumeInUseHereIsDetachedFromHere checks that
// a node that has a multi-node volume mounted can still detach it from a
// dead node: the dead node's attachment is its own, and this node's stage
// and publishes do not stand in its way (nor are they touched).
func TestADeadNodesAttachmentOfAVolumeInUseHereIsDetachedFromHere(t *testing.T) {
	storageSys, n1, n2 := twoNodes(t)
	v := n2.createAndRegister(t, "mw", model.AccessModeMultiNodeMultiWriter)
	_, err := n1.manager.Mount(ctx, "", "mw", "web-1", false)
	require.NoError(t, err)
	res, err := n2.manager.Mount(ctx, "", "mw", "web-2", false)
	require.NoError(t, err)
	require.Equal(t, []string{"n1", "n2"}, storageSys.nodes(v.ExternalID))

	// n1 dies with its mount, and the GC frees its claim.
	n1.stop()
	require.NoError(t, n1.store.Close())
	require.Len(t, gcPastTheGrace(t, n2.store), 1)

	require.NoError(t, n2.manager.Detach(ctx, "", "mw", "n1"), "n2's own mount does not stand in the way of n1's detach")
	require.Equal(t, []string{"n2"}, storageSys.nodes(v.ExternalID), "the controller detached n1 only")
	got, err := n2.store.GetVolume(ctx, "default", "mw")
	require.NoError(t, err)
	require.Equal(t, []string{"n2"}, slices.Sorted(maps.Keys(got.Attachments)))
	require.DirExists(t, res.TargetPath, "n2's mount stays")
	require.NoError(t, n2.manager.Unmount(ctx, "", "mw", "web-2"))
}

// gcPastTheGrace runs two steps of the fleet's GC on store, the second
// past the grace of the down nodes the first one saw, and returns the
// claims it freed.
func gcPastTheGrace(t *testing.T, store *fleet.Store) []fleet.Freed {
	t.Helper()
	gc, err := fleet.StartGC(store, fleet.GCConfig{Grace: time.Minute})
	require.NoError(t, err)
	defer gc.Stop()
	now := time.Now()
	_, err = gc.Step(ctx, now)
	require.NoError(t, err)
	freed, err := gc.Step(ctx, now.Add(2*time.Minute))
	require.NoError(t, err)
	return freed
}

// TestARestartRecordsAnAttachmentTheFleetLost restarts a node whose
// attachment etcd no longer holds (restored from an older backup): the
// start-up reconcile records it again, so that the fleet keeps refusing
// the volume to another node while it is attached here.
func TestARestartRecordsAnAttachmentTheFleetLost(t *testing.T) {
	srv := etcdtest.Start(t)
	storageSys := newStorageSystem(t)
	n1 := newLifecycleNode(t, srv, storageSys, "n1")
	n1.createAndRegister(t, "db", model.AccessModeSingleNodeWriter)
	_, err := n1.manager.Mount(ctx, "", "db", "web-1", false)
	require.NoError(t, err)
	lost, err := n1.store.Detach(ctx, "", "db", "n1")
	require.NoError(t, err)
	require.Empty(t, lost.Attachments)

	n1.restart()
	require.Eventually(t, func() bool {
		got, err := n1.store.GetVolume(ctx, "default", "db")
		return err == nil && got.Attachments["n1"] != nil && got.Attachments["n1"].State == model.AttachmentStateAttached
	}, wait, 20*time.Millisecond, "the reconcile at start records the attachment again")
	require.NoError(t, n1.manager.Unmount(ctx, "", "db", "web-1"))
}

// createAndRegister creates volume id with n's plugin and registers it in
// the fleet, of plugin "hp", with access mode mode.
func (n *lifecycleNode) createAndRegister(t *testing.T, id string, mode model.AccessMode) *model.CSIVolume {
	t.Helper()
	v := model.NewCSIVolume(id, 0)
	v.PluginID, v.ExternalID = "hp", n.plugin.createVolume(id)
	v.AccessMode, v.AttachmentMode = mode, model.AttachmentModeFileSystem
	_, err := n.store.RegisterVolume(ctx, v)
	require.NoError(t, err)
	return v
}

// TestARestartDoesNotAttachAgainWhatAnotherNodeNowHolds restarts a node
// whose single-node volume another node attached meanwhile (its
// attachment detached and its claim freed while it was down): its claim
// gone, the reconcile takes the mount down rather than publishing the
// volume to this node through the controller a second time.
func TestARestartDoesNotAttachAgainWhatAnotherNodeNowHolds(t *testing.T) {
	storageSys, n1, n2 := twoNodes(t)
	v := n1.createAndRegister(t, "db", model.AccessModeSingleNodeWriter)
	_, err := n1.manager.Mount(ctx, "", "db", "web-1", false)
	require.NoError(t, err)
	// While n1 was away: its claim freed, its attachment detached, and n2
	// holding the volume.
	_, err = n2.store.Release(ctx, "", "db", &model.Claim{AllocID: "web-1", State: model.ClaimStateReadyToFree})
	require.NoError(t, err)
	_, err = n2.store.Detach(ctx, "", "db", "n1")
	require.NoError(t, err)
	storageSys.detach(v.ExternalID, "n1")
	_, err = n2.store.Claim(ctx, "", "db", &model.Claim{AllocID: "web-2", NodeID: "n2", Mode: model.ClaimModeWrite, State: model.ClaimStateTaken})
	require.NoError(t, err)
	_, err = n2.store.Attach(ctx, "", "db", &model.Attachment{NodeID: "n2", ExternalNodeID: "n2", State: model.AttachmentStateAttached})
	require.NoError(t, err)

	n1.restart()
	st := n1.settle("db")
	require.Empty(t, st.Record.GetPublishes(), "n1 kept a mount whose claim the fleet freed")
	require.Nil(t, st.Record.GetAttachment())
	require.Empty(t, storageSys.nodes(v.ExternalID), "n1 did not publish the volume to itself again through the controller")
}

// twoNodes starts a fleet of nodes n1 and n2 on one etcd, with one storage
// system.
func twoNodes(t *testing.T) (*storageSystem, *lifecycleNode, *lifecycleNode) {
	t.Helper()
	srv := etcdtest.Start(t)
	storageSys := newStorageSystem(t)
	return storageSys, newLifecycleNode(t, srv, storageSys, "n1"), newLifecycleNode(t, srv, storageSys, "n2")
}

// createSingleWriter creates the single-node-writer volume name through the
// plugin at endpoint, and registers it in the fleet through n as plugin
// "hp"'s.
func createSingleWriter(t *testing.T, n *fleetNode, endpoint, name string) {
	t.Helper()
	c, err := csi.Dial(ctx, endpoint, csi.Options{})
	require.NoError(t, err)
	created, err := c.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csipb.VolumeCapability{{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}}})
	require.NoError(t, c.Close())
	require.NoError(t, err)
	v := model.NewCSIVolume(name, 0)
	v.PluginID, v.ExternalID = "hp", created.GetVolume().GetVolumeId()
	v.AccessMode, v.AttachmentMode = model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem
	_, err = n.store.RegisterVolume(ctx, v)
	require.NoError(t, err)
}
