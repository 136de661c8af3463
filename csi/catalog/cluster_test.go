package catalog_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/messages"
)

// clusterNode is a catalog in cluster mode, on a Fleet of its own node,
// with a probe as its CSI manager.
type clusterNode struct {
	cat     *catalog.Catalog
	manager *probe.Probe
}

// startClusterNode starts node's catalog on a fleet.Store on srv; the
// catalog shuts down, then the store closes, when the test ends.
func startClusterNode(t *testing.T, srv *etcdtest.Server, node string, change ...func(*fleet.Config)) *clusterNode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), catWait)
	defer cancel()
	cfg := fleet.Config{Endpoints: srv.Endpoints(), NodeID: node, LeaseTTL: fleet.MinLeaseTTL, RequestTimeout: time.Second, Logger: probe.Logger(t)}
	for _, c := range change {
		c(&cfg)
	}
	store, err := fleet.Open(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	system := probe.NewSystem(t)
	manager := probe.New(t, system)
	cat, err := catalog.Start(system, catalog.Config{Bucket: catMemoryBucket(t), NodeID: node, Manager: manager.PID(),
		Logger: probe.Logger(t), Fleet: store})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cat.Shutdown(context.Background())) })
	probe.Expect[*messages.SubscribeCSI](t, manager, catWait)
	return &clusterNode{cat: cat, manager: manager}
}

// TestCatalogsInClusterModeShareOneCatalog runs two nodes' catalogs on one
// etcd and checks that volumes, claims and plugin health are one across
// them, whichever path a claim takes (the facade or a ClaimVolume
// message), and that an outage of etcd refuses claims with
// ErrFleetUnavailable.
func TestCatalogsInClusterModeShareOneCatalog(t *testing.T) {
	srv := etcdtest.Start(t)
	a, b := startClusterNode(t, srv, "node-a"), startClusterNode(t, srv, "node-b")
	ctx := context.Background()
	a.manager.Send(a.cat.PID(), &messages.CSIPluginFingerprinted{Fingerprint: catNodeFingerprint("hostpath", "p1", true)})
	b.manager.Send(b.cat.PID(), &messages.CSIPluginFingerprinted{Fingerprint: catNodeFingerprint("hostpath", "p2", true)})
	require.Eventually(t, func() bool {
		plugins, err := b.cat.Plugins(ctx)
		return err == nil && len(plugins) == 1 && plugins[0].NodesHealthy == 2
	}, catWait, 20*time.Millisecond, "each node's fingerprint reaches the fleet: two healthy node plugins")

	_, err := a.cat.RegisterVolume(ctx, catVolume("db", "hostpath", model.AccessModeSingleNodeWriter))
	require.NoError(t, err)
	stubs, err := b.cat.ListVolumes(ctx, "")
	require.NoError(t, err)
	require.Equal(t, []string{"default/db"}, catStubNames(stubs))
	require.True(t, stubs[0].Schedulable)

	require.NoError(t, a.cat.Claim(ctx, catClaim("db", "alloc-a", false)))
	err = b.cat.Claim(ctx, catClaim("db", "alloc-b", false))
	require.ErrorIs(t, err, model.ErrClaimRefused, "the facade on node b sees node a's writer")
	resp := probe.Ask[*messages.ClaimVolumeResponse](t, b.manager, b.cat.PID(),
		&messages.ClaimVolume{VolumeId: "db", AllocId: "alloc-c", Mode: string(model.ClaimModeRead)}, catWait)
	require.ErrorIs(t, messages.ErrorFromProto(resp.GetError()), model.ErrNodeConflict,
		"a ClaimVolume message on node b reaches the fleet too")
	err = b.cat.Claim(ctx, csi.ClaimRequest{VolumeID: "db", AllocID: "alloc-d", Plugin: "other"})
	require.ErrorIs(t, err, model.ErrClaimRefused, "a claim through another plugin is refused as on one node")

	v, err := b.cat.GetVolume(ctx, "", "db")
	require.NoError(t, err)
	require.Equal(t, []string{"alloc-a"}, v.Claimants())
	require.Equal(t, "node-a", v.WriteClaims["alloc-a"].NodeID)
	require.NoError(t, a.cat.Release(ctx, catClaim("db", "alloc-a", false)))
	require.NoError(t, b.cat.Claim(ctx, catClaim("db", "alloc-b", false)))

	srv.Stop()
	err = a.cat.Claim(ctx, catClaim("db", "alloc-e", true))
	require.ErrorIs(t, err, model.ErrFleetUnavailable)
	require.Contains(t, err.Error(), "claims are refused until etcd answers")
	_, err = a.cat.Plugins(ctx)
	require.ErrorIs(t, err, model.ErrFleetUnavailable, "no plugin list is guessed from memory")
	srv.Restart()
}

// TestCatalogInClusterModeForwardsTheLatestWordOfEachPlugin replaces a
// node plugin by a newer alloc, then has the old one's final "stopped"
// fingerprint arrive late: the fleet keeps counting the new one healthy.
func TestCatalogInClusterModeForwardsTheLatestWordOfEachPlugin(t *testing.T) {
	srv := etcdtest.Start(t)
	a := startClusterNode(t, srv, "node-a")
	for _, fp := range []*messages.CSIFingerprint{
		catNodeFingerprint("hostpath", "p1", true),
		catNodeFingerprint("hostpath", "p2", true),
		catStoppedFingerprint("hostpath", "p1"),
		catControllerFingerprint("hostpath", "p2", true),
	} {
		a.manager.Send(a.cat.PID(), &messages.CSIPluginFingerprinted{Fingerprint: fp})
	}
	require.Eventually(t, func() bool {
		plugins, err := a.cat.Plugins(context.Background())
		return err == nil && len(plugins) == 1 && plugins[0].ControllersHealthy == 1
	}, catWait, 20*time.Millisecond, "the last fingerprint reaches the fleet")
	plugins, err := a.cat.Plugins(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, plugins[0].NodesHealthy, "the late word of the replaced alloc is not forwarded")
	require.Equal(t, "p2", plugins[0].Nodes["node-a"].AllocID)
}

// heldFleet is a Fleet whose Claim says it was called on entered and
// waits until release is closed, and which knows no volume; the catalog
// under test calls nothing else.
type heldFleet struct {
	model.Fleet
	entered, release chan struct{}
}

func (f *heldFleet) Claim(_ context.Context, namespace, id string, c *model.Claim) (*model.CSIVolume, error) {
	close(f.entered)
	<-f.release
	v := catVolume(id, "hostpath", model.AccessModeMultiNodeMultiWriter)
	v.Namespace, v.WriteClaims = namespace, map[string]*model.Claim{c.AllocID: c}
	return v, nil
}

func (f *heldFleet) GetVolume(_ context.Context, namespace, id string) (*model.CSIVolume, error) {
	return nil, model.NotFound(namespace, id)
}

// TestCatalogInClusterModeShutsDownAfterTheFleetCallsInFlight starts a
// claim that the Fleet holds, shuts the catalog down meanwhile, and checks
// that the claim is answered from the Fleet and the actor answers the
// shutdown only after it. (The facade orders calls against its Shutdown by
// itself; this is the actor's own contract, for senders of messages.)
func TestCatalogInClusterModeShutsDownAfterTheFleetCallsInFlight(t *testing.T) {
	system := probe.NewSystem(t)
	sender := probe.New(t, system)
	f := &heldFleet{entered: make(chan struct{}), release: make(chan struct{})}
	cat, err := catalog.Start(system, catalog.Config{Bucket: catMemoryBucket(t), NodeID: catNode, Logger: probe.Logger(t), Fleet: f})
	require.NoError(t, err)
	claimed := make(chan error, 1)
	go func() { claimed <- cat.Claim(context.Background(), catClaim("db", "alloc-1", false)) }()
	<-f.entered
	// The answer to the shutdown would reach sender before the answers to
	// its later requests: the loop below would meet it.
	sender.Send(cat.PID(), &messages.ShutdownCatalog{ReplyTo: sender.PID()})
	require.Eventually(t, func() bool {
		resp := probe.Ask[*messages.GetVolumeResponse](t, sender, cat.PID(), &messages.GetVolumeRequest{VolumeId: "db"}, catWait)
		err := messages.ErrorFromProto(resp.GetError())
		if !errors.Is(err, model.ErrVolumeNotFound) && !errors.Is(err, catalog.ErrShutdown) {
			t.Errorf("unexpected answer: %v", err)
		}
		return errors.Is(err, catalog.ErrShutdown)
	}, catWait, 10*time.Millisecond, "the actor takes the shutdown")
	close(f.release)
	require.NoError(t, <-claimed, "the claim in flight is answered from the Fleet")
	probe.Expect[*messages.ShutdownCatalogResponse](t, sender, catWait)
	require.NoError(t, cat.Shutdown(context.Background()))
}

// TestCatalogInClusterModeChecksTheFleetsRoom checks that CheckRoom, the
// early look of a create before the plugin is asked, counts the fleet's
// volumes, not the node's (which holds none in cluster mode).
func TestCatalogInClusterModeChecksTheFleetsRoom(t *testing.T) {
	srv := etcdtest.Start(t)
	limitOne := func(c *fleet.Config) { c.MaxVolumes = 1 }
	a, b := startClusterNode(t, srv, "node-a", limitOne), startClusterNode(t, srv, "node-b", limitOne)
	require.NoError(t, b.cat.CheckRoom("", "db"))
	_, err := a.cat.RegisterVolume(context.Background(), catVolume("db", "hostpath", model.AccessModeSingleNodeWriter))
	require.NoError(t, err)
	require.NoError(t, b.cat.CheckRoom("", "db"), "a volume already in the fleet has room")
	err = b.cat.CheckRoom("", "logs")
	require.ErrorIs(t, err, model.ErrVolumeLimit, "node b sees node a's volume fill the fleet")
	require.ErrorContains(t, err, "the catalog holds 1 volumes, the limit")
}

// TestCatalogInClusterModeTakesBatchesWholeAndRequiresTopologyWhereThePluginDoes
// sends batches through a node's catalog to the fleet, and registrations
// without topology of a plugin this node fingerprinted as requiring one.
func TestCatalogInClusterModeTakesBatchesWholeAndRequiresTopologyWhereThePluginDoes(t *testing.T) {
	srv := etcdtest.Start(t)
	a := startClusterNode(t, srv, "node-a")
	ctx := context.Background()
	fp := catNodeFingerprint("zonal", "p1", true)
	fp.Capabilities.Plugin = []string{"VOLUME_ACCESSIBILITY_CONSTRAINTS"}
	a.manager.Send(a.cat.PID(), &messages.CSIPluginFingerprinted{Fingerprint: fp})
	require.Eventually(t, func() bool {
		plugins, err := a.cat.Plugins(ctx)
		return err == nil && len(plugins) == 1
	}, catWait, 20*time.Millisecond)

	got, err := a.cat.RegisterVolumes(ctx, catBatch("v", 3))
	require.NoError(t, err)
	require.Len(t, got, 3)
	err = a.cat.DeregisterVolumes(ctx, "", []string{"v-0", "gone"})
	require.ErrorIs(t, err, model.ErrVolumeNotFound)
	require.ErrorContains(t, err, `volumes[1] (volume "gone")`)

	_, err = a.cat.RegisterVolumes(ctx, []*model.CSIVolume{catVolume("w", "hostpath", model.AccessModeSingleNodeWriter), catVolume("z", "zonal", model.AccessModeSingleNodeWriter)})
	require.ErrorIs(t, err, model.ErrTopologyRequired)
	require.ErrorContains(t, err, `volumes[1] (volume "z")`)
	_, err = a.cat.RegisterVolume(ctx, catVolume("z", "zonal", model.AccessModeSingleNodeWriter))
	require.ErrorIs(t, err, model.ErrTopologyRequired)
	stubs, err := a.cat.ListVolumes(ctx, "")
	require.NoError(t, err)
	require.Equal(t, []string{"default/v-0", "default/v-1", "default/v-2"}, catStubNames(stubs), "the refusals changed nothing")
	require.NoError(t, a.cat.DeregisterVolumes(ctx, "", []string{"v-0", "v-2"}))
}

// TestCatalogInClusterModeForwardsTheFinalWordOfTheAllocationThatTookOver
// has the allocation a final fingerprint names in replaced_by deregistered
// before it spoke: its own final word is forwarded, not dropped as late.
func TestCatalogInClusterModeForwardsTheFinalWordOfTheAllocationThatTookOver(t *testing.T) {
	srv := etcdtest.Start(t)
	a := startClusterNode(t, srv, "node-a")
	replaced := catStoppedFingerprint("hostpath", "p1")
	replaced.ReplacedBy = "p2"
	for _, fp := range []*messages.CSIFingerprint{
		catNodeFingerprint("hostpath", "p1", true),
		replaced,
		catStoppedFingerprint("hostpath", "p2"),
		catNodeFingerprint("barrier", "b1", true),
	} {
		a.manager.Send(a.cat.PID(), &messages.CSIPluginFingerprinted{Fingerprint: fp})
	}
	var plugins []*model.CSIPlugin
	require.Eventually(t, func() bool {
		var err error
		plugins, err = a.cat.Plugins(context.Background())
		return err == nil && slices.ContainsFunc(plugins, func(p *model.CSIPlugin) bool { return p.ID == "barrier" })
	}, catWait, 20*time.Millisecond, "the last fingerprint reaches the fleet, with every one before it")
	for _, p := range plugins {
		if p.ID == "hostpath" && p.Nodes["node-a"] != nil {
			require.Equal(t, "p2", p.Nodes["node-a"].AllocID, "the fleet has the final word of the allocation that took over")
		}
	}
}
