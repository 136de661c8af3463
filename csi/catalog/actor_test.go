package catalog_test

import (
	"cmp"
	"context"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/storage"
	"github.com/plugvisor/plugvisor/storage/storagetest"
)

// catWait bounds how long a catalog test waits for what must happen.
const catWait = 5 * time.Second

// catNode is the node ID of the catalogs under test.
const catNode = "node-1"

// catFixture is a catalog under test, with a probe that plays its CSI
// manager and sends it commands.
type catFixture struct {
	t       *testing.T
	system  *actor.ActorSystem
	cat     *catalog.Catalog
	manager *probe.Probe
}

// startCatFixture starts a catalog on bucket in a new actor system, with a
// probe as its CSI manager, and checks that the catalog subscribed to it
// with replay.
func startCatFixture(t *testing.T, bucket storage.Bucket) *catFixture {
	t.Helper()
	system := probe.NewSystem(t)
	manager := probe.New(t, system)
	cat := startCat(t, system, bucket, manager.PID())
	sub := probe.Expect[*messages.SubscribeCSI](t, manager, catWait)
	require.True(t, sub.GetSubscriber().Equal(cat.PID()))
	require.True(t, sub.GetReplay())
	return &catFixture{t: t, system: system, cat: cat, manager: manager}
}

// catTwoRuns runs two subtests of t on one bbolt file, each on a catalog
// of its own: "first run", on a catalog fed fps first, and then restart,
// on a catalog started again on what the first left.
func catTwoRuns(t *testing.T, fps []*messages.CSIFingerprint, first func(*testing.T, *catFixture),
	restart string, restarted func(*testing.T, *catFixture)) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	t.Run("first run", func(t *testing.T) {
		f := startCatFixture(t, catBoltBucket(t, path))
		f.feed(fps...)
		first(t, f)
	})
	t.Run(restart, func(t *testing.T) {
		restarted(t, startCatFixture(t, catBoltBucket(t, path)))
	})
}

// startCat starts a catalog and shuts it down when the test ends.
func startCat(t *testing.T, system *actor.ActorSystem, bucket storage.Bucket, manager *actor.PID) *catalog.Catalog {
	t.Helper()
	cat, err := catalog.Start(system, catalog.Config{Bucket: bucket, NodeID: catNode, Manager: manager, Logger: probe.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cat.Shutdown(context.Background())) })
	return cat
}

func catMemoryBucket(t *testing.T) storage.Bucket {
	t.Helper()
	bucket, err := storage.NewMemory().Bucket(catalog.Bucket)
	require.NoError(t, err)
	return bucket
}

// feed sends fingerprints to the catalog as its CSI manager does, and
// returns once they are durable.
func (f *catFixture) feed(fps ...*messages.CSIFingerprint) {
	f.t.Helper()
	for _, fp := range fps {
		f.manager.Send(f.cat.PID(), &messages.CSIPluginFingerprinted{Fingerprint: fp})
	}
	f.settle()
}

// settle returns once every write sent to the catalog before it is
// durable: the catalog answers writes in the order they came, each once
// the writes before it are durable, so even a refused write is a barrier.
func (f *catFixture) settle() {
	f.t.Helper()
	resp := probe.Ask[*messages.DeregisterVolumeResponse](f.t, f.manager, f.cat.PID(), &messages.DeregisterVolume{VolumeId: "no-such-volume"}, catWait)
	require.ErrorIs(f.t, messages.ErrorFromProto(resp.GetError()), model.ErrVolumeNotFound)
}

// catAsk sends msg to the catalog from the manager probe and returns the
// answer, an R, with the error it carries.
func catAsk[R interface {
	proto.Message
	GetError() *messages.Error
}](f *catFixture, msg proto.Message) (R, error) {
	f.t.Helper()
	resp := probe.Ask[R](f.t, f.manager, f.cat.PID(), msg, catWait)
	return resp, messages.ErrorFromProto(resp.GetError())
}

func (f *catFixture) volume(namespace, id string) *model.CSIVolume {
	f.t.Helper()
	v, err := f.cat.GetVolume(context.Background(), namespace, id)
	require.NoError(f.t, err)
	return v
}

func (f *catFixture) plugin(id string) *model.CSIPlugin {
	f.t.Helper()
	plugins, err := f.cat.Plugins(context.Background())
	require.NoError(f.t, err)
	for _, p := range plugins {
		if p.ID == id {
			return p
		}
	}
	f.t.Fatalf("plugin %q is not in the catalog", id)
	return nil
}

// catDump is everything a catalog shows: its plugins and its volumes with
// their claims.
type catDump struct {
	plugins []*model.CSIPlugin
	volumes []*model.CSIVolume
}

func (f *catFixture) dump() catDump {
	f.t.Helper()
	ctx := context.Background()
	plugins, err := f.cat.Plugins(ctx)
	require.NoError(f.t, err)
	stubs, err := f.cat.ListVolumes(ctx, "")
	require.NoError(f.t, err)
	d := catDump{plugins: plugins}
	for _, s := range stubs {
		d.volumes = append(d.volumes, f.volume(s.Namespace, s.ID))
	}
	return d
}

// lastIndex is the highest index the dump shows.
func (d catDump) lastIndex() uint64 {
	var last uint64
	for _, p := range d.plugins {
		last = max(last, p.ModifyIndex)
	}
	for _, v := range d.volumes {
		last = max(last, v.ModifyIndex)
	}
	return last
}

func catVolume(id, plugin string, mode model.AccessMode) *model.CSIVolume {
	v := model.NewCSIVolume(id, 0)
	v.PluginID, v.AccessMode, v.AttachmentMode = plugin, mode, model.AttachmentModeFileSystem
	return v
}

func (f *catFixture) register(v *model.CSIVolume) *model.CSIVolume {
	f.t.Helper()
	got, err := f.cat.RegisterVolume(context.Background(), v)
	require.NoError(f.t, err)
	return got
}

// catNodeFingerprint is a fingerprint of a node plugin instance as the CSI
// manager publishes it.
func catNodeFingerprint(plugin, alloc string, healthy bool) *messages.CSIFingerprint {
	description := csi.HealthyDescription
	if !healthy {
		description = "Probe: plugin is not ready"
	}
	return &messages.CSIFingerprint{
		Type: csi.TypeNode, Name: plugin, AllocId: alloc, Healthy: healthy, HealthDescription: description,
		PluginInfo:   &messages.CSIPluginInfo{Name: "hostpath.csi.k8s.io", VendorVersion: "1.17.0"},
		Capabilities: &messages.CSICapabilities{Node: []string{"STAGE_UNSTAGE_VOLUME"}},
		NodeInfo:     &messages.CSINodeInfo{NodeId: "csi-" + catNode, AccessibleTopology: map[string]string{"zone": "a"}},
	}
}

// catStoppedFingerprint is the final fingerprint of a node plugin instance.
func catStoppedFingerprint(plugin, alloc string) *messages.CSIFingerprint {
	fp := catNodeFingerprint(plugin, alloc, false)
	fp.HealthDescription = csi.StoppedDescription
	return fp
}

func catControllerFingerprint(plugin, alloc string, healthy bool) *messages.CSIFingerprint {
	fp := catNodeFingerprint(plugin, alloc, healthy)
	fp.Type, fp.NodeInfo = csi.TypeController, nil
	fp.Capabilities = &messages.CSICapabilities{Controller: []string{"CREATE_DELETE_VOLUME"}}
	return fp
}

func catClaim(volume, alloc string, readOnly bool) csi.ClaimRequest {
	return csi.ClaimRequest{VolumeID: volume, AllocID: alloc, Usage: csi.Usage{ReadOnly: readOnly}}
}

func TestCatalogRegistersListsGetsAndDeregistersVolumes(t *testing.T) {
	f := startCatFixture(t, catMemoryBucket(t))
	ctx := context.Background()

	db := f.register(catVolume("db", "hostpath", model.AccessModeSingleNodeWriter))
	require.Equal(t, model.DefaultNamespace, db.Namespace, "an empty namespace is the default one")
	require.Equal(t, [2]uint64{1, 1}, [2]uint64{db.CreateIndex, db.ModifyIndex})
	require.False(t, db.Schedulable, "a volume of a plugin never seen is unschedulable")

	web := catVolume("web", "hostpath", model.AccessModeMultiNodeMultiWriter)
	web.Namespace = "prod"
	web.Topologies = []*model.Topology{{Segments: map[string]string{"zone": "a"}}}
	resp, err := catAsk[*messages.RegisterVolumeResponse](f, &messages.RegisterVolume{Volume: web.Proto()})
	require.NoError(t, err)
	require.Equal(t, uint64(2), resp.GetVolume().GetCreateIndex())

	all, err := f.cat.ListVolumes(ctx, "")
	require.NoError(t, err)
	require.Equal(t, []string{"default/db", "prod/web"}, catStubNames(all))
	prod, err := f.cat.ListVolumes(ctx, "prod")
	require.NoError(t, err)
	require.Equal(t, []string{"prod/web"}, catStubNames(prod))
	require.Equal(t, web.Topologies, prod[0].Topologies)

	require.Equal(t, db, f.volume("", "db"))
	got, err := catAsk[*messages.GetVolumeResponse](f, &messages.GetVolumeRequest{Namespace: "prod", VolumeId: "web"})
	require.NoError(t, err)
	require.Equal(t, uint64(2), got.GetVolume().GetModifyIndex())

	again := f.register(catVolume("db", "hostpath", model.AccessModeSingleNodeWriter))
	require.Equal(t, db, again, "registering the same description again changes nothing")

	changed := catVolume("db", "hostpath", model.AccessModeSingleNodeWriter)
	changed.Topologies = []*model.Topology{{Segments: map[string]string{"zone": "b"}}}
	changed = f.register(changed)
	require.Equal(t, [2]uint64{1, 3}, [2]uint64{changed.CreateIndex, changed.ModifyIndex}, "a change keeps the create index")

	require.NoError(t, f.cat.DeregisterVolume(ctx, "", "db"))
	_, err = f.cat.GetVolume(ctx, "", "db")
	require.ErrorIs(t, err, model.ErrVolumeNotFound)
	require.ErrorIs(t, f.cat.DeregisterVolume(ctx, "", "db"), model.ErrVolumeNotFound)
	all, err = f.cat.ListVolumes(ctx, "")
	require.NoError(t, err)
	require.Equal(t, []string{"prod/web"}, catStubNames(all))

	next := f.register(catVolume("db", "hostpath", model.AccessModeSingleNodeWriter))
	require.Equal(t, uint64(5), next.CreateIndex, "the deregistration took index 4")
}

func catStubNames(stubs []*model.CSIVolumeStub) []string {
	names := make([]string, len(stubs))
	for i, s := range stubs {
		names[i] = s.Namespace + "/" + s.ID
	}
	return names
}

func TestCatalogFingerprintsKeepPluginCountsAndVolumeHealth(t *testing.T) {
	f := startCatFixture(t, catMemoryBucket(t))
	f.register(catVolume("db", "hostpath", model.AccessModeSingleNodeWriter))
	f.register(catVolume("other", "nfs", model.AccessModeSingleNodeWriter))

	steps := []struct {
		name               string
		send               []*messages.CSIFingerprint
		nodes, controllers int    // healthy counts
		nodeAlloc          string // alloc of this node's node entry
		schedulable        bool
		changed            bool // the plugin and its volume take a new index
	}{
		{"a healthy node fingerprint makes the volume schedulable",
			[]*messages.CSIFingerprint{catNodeFingerprint("hostpath", "a1", true)}, 1, 0, "a1", true, true},
		{"the same fingerprint again changes nothing",
			[]*messages.CSIFingerprint{catNodeFingerprint("hostpath", "a1", true)}, 1, 0, "a1", true, false},
		{"an unhealthy controller counts apart and does not matter when not required",
			[]*messages.CSIFingerprint{catControllerFingerprint("hostpath", "c1", false)}, 1, 0, "a1", true, true},
		{"a healthy controller counts",
			[]*messages.CSIFingerprint{catControllerFingerprint("hostpath", "c1", true)}, 1, 1, "a1", true, true},
		{"the node plugin turning unhealthy makes the volume unschedulable",
			[]*messages.CSIFingerprint{catNodeFingerprint("hostpath", "a1", false)}, 0, 1, "a1", false, true},
		{"a new alloc's healthy fingerprint replaces the old alloc's",
			[]*messages.CSIFingerprint{catNodeFingerprint("hostpath", "a2", true)}, 1, 1, "a2", true, true},
		{"the replaced alloc's late final fingerprint is ignored",
			[]*messages.CSIFingerprint{catStoppedFingerprint("hostpath", "a1")}, 1, 1, "a2", true, false},
		{"the current alloc's final fingerprint counts as unhealthy",
			[]*messages.CSIFingerprint{catStoppedFingerprint("hostpath", "a2")}, 0, 1, "a2", false, true},
		{"a new alloc coming back is healthy again",
			[]*messages.CSIFingerprint{catNodeFingerprint("hostpath", "a3", true)}, 1, 1, "a3", true, true},
	}
	var lastIndex uint64
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			f.feed(step.send...)
			p := f.plugin("hostpath")
			require.Equal(t, step.nodes, p.NodesHealthy)
			require.Equal(t, step.controllers, p.ControllersHealthy)
			require.Equal(t, step.nodeAlloc, p.Nodes[catNode].AllocID)
			require.Equal(t, "hostpath.csi.k8s.io", p.Provider)
			v := f.volume("", "db")
			require.Equal(t, model.PluginHealth(p), v.Health, "the volume's health follows its plugin")
			require.Equal(t, step.schedulable, v.Schedulable)
			if step.changed {
				require.Greater(t, p.ModifyIndex, lastIndex)
			} else {
				require.Equal(t, lastIndex, p.ModifyIndex)
			}
			lastIndex = p.ModifyIndex
			other := f.volume("", "other")
			require.False(t, other.Schedulable, "a volume of another plugin is untouched")
			require.Equal(t, uint64(2), other.ModifyIndex)
		})
	}

	t.Run("health events and failures alone change nothing", func(t *testing.T) {
		before := f.dump()
		f.manager.Send(f.cat.PID(), &messages.CSIPluginHealthChanged{Type: csi.TypeNode, Name: "hostpath", AllocId: "a3"})
		f.manager.Send(f.cat.PID(), &messages.CSIPluginFailed{Type: csi.TypeNode, Name: "hostpath", AllocId: "a3"})
		f.settle()
		require.Equal(t, before, f.dump())
	})
}

func TestCatalogGrantsAndRefusesClaimsByTheRules(t *testing.T) {
	f := startCatFixture(t, catMemoryBucket(t))
	ctx := context.Background()
	f.feed(catNodeFingerprint("hostpath", "p1", true))
	f.register(catVolume("db", "hostpath", model.AccessModeSingleNodeWriter))

	claimMsg := func(alloc string, mode model.ClaimMode, node string) func() error {
		return func() error {
			_, err := catAsk[*messages.ClaimVolumeResponse](f, &messages.ClaimVolume{VolumeId: "db", AllocId: alloc, Mode: string(mode), NodeId: node})
			return err
		}
	}
	steps := []struct {
		name    string
		do      func() error
		wantErr []error
		check   func(t *testing.T, v *model.CSIVolume)
		changed bool
	}{
		{name: "alloc a1 claims to write by message", do: claimMsg("a1", model.ClaimModeWrite, ""), changed: true,
			check: func(t *testing.T, v *model.CSIVolume) {
				require.Equal(t, &model.Claim{AllocID: "a1", NodeID: catNode, Mode: model.ClaimModeWrite, State: model.ClaimStateTaken}, v.WriteClaims["a1"])
			}},
		{name: "alloc a1 claiming the same again changes nothing", do: claimMsg("a1", model.ClaimModeWrite, catNode)},
		{name: "a second writer is refused",
			do:      func() error { return f.cat.Claim(ctx, catClaim("db", "a2", false)) },
			wantErr: []error{model.ErrClaimRefused, model.ErrVolumeMaxClaims}},
		{name: "a reader on the same node is granted", changed: true,
			do:    func() error { return f.cat.Claim(ctx, catClaim("db", "a2", true)) },
			check: func(t *testing.T, v *model.CSIVolume) { require.Contains(t, v.ReadClaims, "a2") }},
		{name: "a reader on another node is refused", do: claimMsg("a3", model.ClaimModeRead, "node-2"),
			wantErr: []error{model.ErrClaimRefused, model.ErrNodeConflict}},
		{name: "the writer asking to read as well is refused", do: claimMsg("a1", model.ClaimModeRead, ""),
			wantErr: []error{model.ErrClaimRefused, model.ErrClaimModeConflict}},
		{name: "a claim through another plugin is refused",
			do: func() error {
				req := catClaim("db", "a4", true)
				req.Plugin = "nfs"
				return f.cat.Claim(ctx, req)
			},
			wantErr: []error{model.ErrClaimRefused}},
		{name: "a claim with another access mode is refused",
			do: func() error {
				req := catClaim("db", "a4", true)
				req.Plugin, req.Usage.AccessMode = "hostpath", model.AccessModeMultiNodeReader
				return f.cat.Claim(ctx, req)
			},
			wantErr: []error{model.ErrClaimRefused}},
		{name: "deregistering the claimed volume is refused",
			do:      func() error { return f.cat.DeregisterVolume(ctx, "", "db") },
			wantErr: []error{model.ErrVolumeInUse}},
		{name: "moving the writer's claim to unpublishing keeps it as a past claim", changed: true,
			do: func() error {
				_, err := catAsk[*messages.ReleaseVolumeResponse](f, &messages.ReleaseVolume{VolumeId: "db", AllocId: "a1", State: string(model.ClaimStateUnpublishing)})
				return err
			},
			check: func(t *testing.T, v *model.CSIVolume) {
				require.Contains(t, v.WriteClaims, "a1")
				require.Equal(t, model.ClaimStateUnpublishing, v.PastClaims["a1"].State)
				require.Empty(t, v.PastClaims["a1"].LastError)
			}},
		{name: "a release stuck at node-detached keeps its last error, cut to a bounded length", changed: true,
			do: func() error {
				_, err := catAsk[*messages.ReleaseVolumeResponse](f, &messages.ReleaseVolume{VolumeId: "db", AllocId: "a1",
					State: string(model.ClaimStateNodeDetached), LastError: "ControllerUnpublishVolume: unavailable: " + strings.Repeat("é", 2000)})
				return err
			},
			check: func(t *testing.T, v *model.CSIVolume) {
				past := v.PastClaims["a1"]
				require.Equal(t, model.ClaimStateNodeDetached, past.State)
				require.True(t, strings.HasPrefix(past.LastError, "ControllerUnpublishVolume: unavailable: éé"))
				require.LessOrEqual(t, len(past.LastError), 1024+len("…"))
				require.True(t, utf8.ValidString(past.LastError), "the cut keeps whole characters")
			}},
		{name: "claiming while the claim is being released is refused",
			do:      func() error { return f.cat.Claim(ctx, catClaim("db", "a1", false)) },
			wantErr: []error{model.ErrClaimRefused, model.ErrClaimReleasing}},
		{name: "releasing frees the claim", changed: true,
			do: func() error { return f.cat.Release(ctx, catClaim("db", "a1", false)) },
			check: func(t *testing.T, v *model.CSIVolume) {
				require.Empty(t, v.WriteClaims)
				require.Empty(t, v.PastClaims)
			}},
		{name: "releasing again changes nothing", do: func() error { return f.cat.Release(ctx, catClaim("db", "a1", false)) }},
		{name: "releasing on a volume the catalog does not know changes nothing",
			do: func() error { return f.cat.Release(ctx, catClaim("gone", "a1", false)) }},
		{name: "another writer is granted now", changed: true,
			do:    func() error { return f.cat.Claim(ctx, catClaim("db", "a5", false)) },
			check: func(t *testing.T, v *model.CSIVolume) { require.Equal(t, []string{"a5"}, catKeys(v.WriteClaims)) }},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			before := f.volume("", "db")
			err := step.do()
			for _, want := range step.wantErr {
				require.ErrorIs(t, err, want)
			}
			if step.wantErr == nil {
				require.NoError(t, err)
			}
			after := f.volume("", "db")
			if !step.changed {
				require.Equal(t, before, after, "nothing changed")
				return
			}
			require.Equal(t, before.ModifyIndex+1, after.ModifyIndex)
			if step.check != nil {
				step.check(t, after)
			}
		})
	}
}

func catKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

func TestCatalogRefusesBadInputAndChangesNothing(t *testing.T) {
	f := startCatFixture(t, catMemoryBucket(t))
	ctx := context.Background()
	f.feed(catNodeFingerprint("hostpath", "p1", true))
	f.register(catVolume("db", "hostpath", model.AccessModeSingleNodeWriter))
	require.NoError(t, f.cat.Claim(ctx, catClaim("db", "a1", false)))
	require.NoError(t, f.cat.Claim(ctx, catClaim("db", "a2", true)))

	register := func(change func(v *model.CSIVolume)) func() error {
		return func() error {
			v := catVolume("vol", "hostpath", model.AccessModeSingleNodeWriter)
			change(v)
			_, err := f.cat.RegisterVolume(ctx, v)
			return err
		}
	}
	send := func(msg proto.Message) func() error {
		return func() error {
			f.manager.Send(f.cat.PID(), msg)
			resp, ok := probe.Expect[proto.Message](t, f.manager, catWait).(interface{ GetError() *messages.Error })
			require.True(t, ok, "the answer carries an error")
			return messages.ErrorFromProto(resp.GetError())
		}
	}
	fingerprint := func(change func(fp *messages.CSIFingerprint)) func() error {
		return func() error {
			fp := catNodeFingerprint("hostpath", "p2", true)
			change(fp)
			f.feed(fp)
			return nil
		}
	}
	claim := func(msg *messages.ClaimVolume) func() error {
		msg.VolumeId = cmp.Or(msg.VolumeId, "db")
		msg.AllocId = cmp.Or(msg.AllocId, "a3")
		msg.Mode = cmp.Or(msg.Mode, "read")
		return send(msg)
	}
	release := func(msg *messages.ReleaseVolume) func() error {
		msg.VolumeId = cmp.Or(msg.VolumeId, "db")
		msg.AllocId = cmp.Or(msg.AllocId, "a2")
		return send(msg)
	}
	tests := []struct {
		name    string
		do      func() error
		wantErr []error // none for fingerprints: nobody is answered
	}{
		{"a volume with an empty ID", register(func(v *model.CSIVolume) { v.ID = "" }), []error{model.ErrInvalid}},
		{"a volume ID with a path separator", register(func(v *model.CSIVolume) { v.ID = "a/b" }), []error{model.ErrInvalid}},
		{"a volume ID that climbs out", register(func(v *model.CSIVolume) { v.ID = ".." }), []error{model.ErrInvalid}},
		{"a namespace that climbs out", register(func(v *model.CSIVolume) { v.Namespace = "../etc" }), []error{model.ErrInvalid}},
		{"a volume ID that is not UTF-8", register(func(v *model.CSIVolume) { v.ID = "vol\xff" }), []error{model.ErrInvalid}},
		{"a volume without a plugin", register(func(v *model.CSIVolume) { v.PluginID = "" }), []error{model.ErrInvalid}},
		{"a plugin ID with a path separator", register(func(v *model.CSIVolume) { v.PluginID = "host/path" }), []error{model.ErrInvalid}},
		{"an unknown access mode", register(func(v *model.CSIVolume) { v.AccessMode = "single-node-admin" }),
			[]error{model.ErrInvalid, model.ErrUnknownAccessMode}},
		{"an unknown attachment mode", register(func(v *model.CSIVolume) { v.AttachmentMode = "floppy" }),
			[]error{model.ErrInvalid, model.ErrUnknownAttachmentMode}},
		{"a registration that carries claims", register(func(v *model.CSIVolume) {
			v.WriteClaims["a9"] = &model.Claim{AllocID: "a9", NodeID: catNode, Mode: model.ClaimModeWrite, State: model.ClaimStateTaken}
		}), []error{model.ErrInvalid}},
		{"a registration message without a volume", send(&messages.RegisterVolume{}), []error{model.ErrInvalid}},
		{"a new description for a claimed volume", register(func(v *model.CSIVolume) {
			v.ID, v.AccessMode = "db", model.AccessModeMultiNodeMultiWriter
		}), []error{model.ErrVolumeInUse}},

		{"deregistering an empty ID", send(&messages.DeregisterVolume{}), []error{model.ErrInvalid}},
		{"deregistering in a namespace that climbs out", send(&messages.DeregisterVolume{Namespace: "..", VolumeId: "db"}), []error{model.ErrInvalid}},
		{"deregistering an unknown volume", send(&messages.DeregisterVolume{VolumeId: "nope"}), []error{model.ErrVolumeNotFound}},
		{"deregistering a claimed volume", send(&messages.DeregisterVolume{VolumeId: "db"}), []error{model.ErrVolumeInUse}},

		{"a claim with an empty alloc ID", send(&messages.ClaimVolume{VolumeId: "db", Mode: "read"}), []error{model.ErrInvalid}},
		{"a claim by an alloc ID that climbs out", claim(&messages.ClaimVolume{AllocId: "../a1"}), []error{model.ErrInvalid}},
		{"a claim on a node ID with a separator", claim(&messages.ClaimVolume{NodeId: "n/1"}), []error{model.ErrInvalid}},
		{"a claim in an unknown mode", claim(&messages.ClaimVolume{Mode: "admin"}), []error{model.ErrInvalid, model.ErrUnknownClaimMode}},
		{"a claim with an unknown access mode", claim(&messages.ClaimVolume{AccessMode: "bogus"}), []error{model.ErrInvalid, model.ErrUnknownAccessMode}},
		{"a claim on an unknown volume", claim(&messages.ClaimVolume{VolumeId: "nope"}), []error{model.ErrVolumeNotFound}},
		{"a write claim by an alloc that holds a read claim", claim(&messages.ClaimVolume{AllocId: "a2", Mode: "write"}),
			[]error{model.ErrClaimRefused, model.ErrClaimModeConflict}},
		{"a read claim by an alloc that holds a write claim", claim(&messages.ClaimVolume{AllocId: "a1", Mode: "read"}),
			[]error{model.ErrClaimRefused, model.ErrClaimModeConflict}},
		{"a second writer", claim(&messages.ClaimVolume{AllocId: "a3", Mode: "write"}), []error{model.ErrClaimRefused, model.ErrVolumeMaxClaims}},

		{"a release to state taken", release(&messages.ReleaseVolume{State: "taken"}), []error{model.ErrInvalid}},
		{"a release to an unknown state", release(&messages.ReleaseVolume{State: "gone-fishing"}), []error{model.ErrInvalid, model.ErrUnknownClaimState}},
		{"a release by an alloc ID with a separator", release(&messages.ReleaseVolume{AllocId: "a/2"}), []error{model.ErrInvalid}},
		{"a release on an unknown volume", release(&messages.ReleaseVolume{VolumeId: "nope"}), []error{model.ErrVolumeNotFound}},
		{"moving a claim that is not held to unpublishing", release(&messages.ReleaseVolume{AllocId: "a7", State: "unpublishing"}),
			[]error{model.ErrClaimRefused, model.ErrClaimNotFound}},

		{"getting a volume ID that climbs out", send(&messages.GetVolumeRequest{VolumeId: "../db"}), []error{model.ErrInvalid}},
		{"listing a namespace with a separator", send(&messages.ListVolumesRequest{Namespace: "a/b"}), []error{model.ErrInvalid}},

		{"a fingerprint of another plugin type", fingerprint(func(fp *messages.CSIFingerprint) { fp.Type = "docker-volume" }), nil},
		{"a fingerprint without a plugin name", fingerprint(func(fp *messages.CSIFingerprint) { fp.Name = "" }), nil},
		{"a fingerprint whose plugin name climbs out", fingerprint(func(fp *messages.CSIFingerprint) { fp.Name = "../hostpath" }), nil},
		{"a fingerprint without an alloc", fingerprint(func(fp *messages.CSIFingerprint) { fp.AllocId = "" }), nil},
	}
	before := f.dump()
	for _, tt := range tests {
		t.Run(tt.name+" is refused and changes nothing", func(t *testing.T) {
			err := tt.do()
			for _, want := range tt.wantErr {
				require.ErrorIs(t, err, want)
			}
			if err != nil {
				require.True(t, strings.HasPrefix(err.Error(), tt.wantErr[0].Error()+": "), "prefixed by its sentinel, once: %q", err)
			}
			f.settle()
			require.Equal(t, before, f.dump())
		})
	}

	t.Run("no refusal took an index", func(t *testing.T) {
		v := f.register(catVolume("vol", "hostpath", model.AccessModeSingleNodeWriter))
		require.Equal(t, before.lastIndex()+1, v.CreateIndex)
	})
}

func TestCatalogComesBackFromItsBoltFileAfterARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	ctx := context.Background()
	openBucket := func(t *testing.T) storage.Bucket {
		store, err := storage.OpenBolt(path, storage.BoltOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, store.Close()) })
		bucket, err := store.Bucket(catalog.Bucket)
		require.NoError(t, err)
		return bucket
	}

	var before catDump
	t.Run("first run", func(t *testing.T) {
		f := startCatFixture(t, openBucket(t))
		f.feed(catNodeFingerprint("hostpath", "p1", true))                        // 1
		f.register(catVolume("db", "hostpath", model.AccessModeSingleNodeWriter)) // 2
		web := catVolume("web", "hostpath", model.AccessModeMultiNodeReader)
		web.Namespace = "prod"
		f.register(web)                                                            // 3
		require.NoError(t, f.cat.Claim(ctx, catClaim("db", "a1", false)))          // 4
		f.register(catVolume("tmp", "hostpath", model.AccessModeSingleNodeWriter)) // 5
		require.NoError(t, f.cat.DeregisterVolume(ctx, "", "tmp"))                 // 6
		before = f.dump()
		require.Equal(t, uint64(4), before.lastIndex(), "what is left shows index 4; the deregistration took 6")
	})

	t.Run("second run", func(t *testing.T) {
		f := startCatFixture(t, openBucket(t))
		after := f.dump()
		require.Len(t, after.volumes, len(before.volumes))
		for i, v := range after.volumes {
			was := before.volumes[i]
			require.True(t, was.Equal(v), "volume %s/%s comes back as it was", v.Namespace, v.ID)
			require.Equal(t, was.CreateIndex, v.CreateIndex)
			require.Equal(t, [3]map[string]*model.Claim{was.ReadClaims, was.WriteClaims, was.PastClaims},
				[3]map[string]*model.Claim{v.ReadClaims, v.WriteClaims, v.PastClaims}, "claims come back")
			require.False(t, v.Schedulable, "health is not trusted across a restart")
			require.Equal(t, uint64(7), v.ModifyIndex, "distrusting health took index 7, after the deregistration's 6")
		}
		p := f.plugin("hostpath")
		require.Equal(t, 0, p.NodesHealthy)
		require.Equal(t, "p1", p.Nodes[catNode].AllocID)
		require.Contains(t, p.Nodes[catNode].HealthDescription, "restored at start")
		require.ErrorIs(t, f.cat.Claim(ctx, catClaim("db", "a2", true)), model.ErrVolumeUnschedulable)

		f.feed(catNodeFingerprint("hostpath", "p1", true)) // 8: the manager's replay
		require.True(t, f.volume("", "db").Schedulable)
		require.ErrorIs(t, f.cat.Claim(ctx, catClaim("db", "a2", false)), model.ErrVolumeMaxClaims, "a1 still holds the write claim")
		require.Equal(t, uint64(9), f.register(catVolume("tmp", "hostpath", model.AccessModeSingleNodeWriter)).CreateIndex,
			"indexes keep growing")
	})
}

func TestCatalogRefusesToStartFromACorruptRecord(t *testing.T) {
	record := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		require.NoError(t, err)
		return b
	}
	good := catVolume("db", "hostpath", model.AccessModeSingleNodeWriter).Proto()
	badMode := catVolume("db", "hostpath", "single-node-admin").Proto()
	tests := []struct {
		name       string
		key        string
		value      []byte
		wantDetail string
	}{
		{"a volume record that does not decode", "volume/default/db", []byte{0xff, 0xff, 0xff}, "cannot parse"},
		{"a volume record under another volume's key", "volume/default/web", record(good), "holds volume default/db"},
		{"a volume record with an unknown access mode", "volume/default/db", record(badMode), "unknown access mode"},
		{"a plugin record that does not decode", "plugin/hostpath", []byte{0x0a}, "cannot parse"},
		{"a plugin record under another plugin's key", "plugin/nfs", record(&messages.CatalogPlugin{Id: "hostpath"}), `holds plugin "hostpath"`},
		{"a plugin record with an instance of another plugin", "plugin/hostpath", record(&messages.CatalogPlugin{
			Id: "hostpath", Nodes: map[string]*messages.CatalogInstance{catNode: {PluginId: "nfs", AllocId: "a1", NodeInfo: &messages.CatalogNodeInfo{}}},
		}), `is for plugin "nfs"`},
		{"an index record that does not decode", "index", []byte{0x08}, "cannot parse"},
		{"a record that is not the catalog's", "registry/thing", []byte{}, "not a catalog record"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, err := storage.OpenBolt(filepath.Join(t.TempDir(), "state.db"), storage.BoltOptions{})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, store.Close()) })
			bucket, err := store.Bucket(catalog.Bucket)
			require.NoError(t, err)
			require.NoError(t, bucket.Apply([]storage.Op{storage.Put([]byte(tt.key), tt.value)}))

			system := probe.NewSystem(t)
			_, err = catalog.Start(system, catalog.Config{Bucket: bucket, NodeID: catNode, Logger: probe.Logger(t)})
			require.ErrorIs(t, err, model.ErrCorrupt)
			require.ErrorIs(t, err, storage.ErrCorrupt, "the store's one kind of corruption, with its one remedy")
			require.Contains(t, err.Error(), `bucket "csi.catalog", record "`+tt.key+`"`)
			require.Contains(t, err.Error(), tt.wantDetail)
			require.Contains(t, err.Error(), "-reset-corrupt-state", "the error names the flag that recovers")
		})
	}
}

func TestCatalogRollsBackWhenTheStoreFails(t *testing.T) {
	bucket := &storagetest.FlakyBucket{Bucket: catMemoryBucket(t)}
	f := startCatFixture(t, bucket)
	ctx := context.Background()
	f.feed(catNodeFingerprint("hostpath", "p1", true))
	f.register(catVolume("db", "hostpath", model.AccessModeSingleNodeWriter))
	before := f.dump()

	bucket.Failing.Store(true)
	_, err := f.cat.RegisterVolume(ctx, catVolume("web", "hostpath", model.AccessModeSingleNodeWriter))
	require.ErrorIs(t, err, model.ErrStore)
	require.Contains(t, err.Error(), storagetest.ErrNoSpace.Error())
	require.ErrorIs(t, f.cat.Claim(ctx, catClaim("db", "a1", false)), model.ErrStore)
	require.Equal(t, before, f.dump(), "nothing that failed to be stored is shown")

	bucket.Failing.Store(false)
	web := f.register(catVolume("web", "hostpath", model.AccessModeSingleNodeWriter))
	require.Equal(t, before.lastIndex()+1, web.CreateIndex, "the failed writes gave their indexes back")
	require.NoError(t, f.cat.Claim(ctx, catClaim("db", "a1", false)))
}

func TestCatalogShutdownFinishesAcceptedWritesAndRefusesLaterOnes(t *testing.T) {
	f := startCatFixture(t, catMemoryBucket(t))
	ctx := context.Background()

	f.manager.Send(f.cat.PID(), &messages.RegisterVolume{Volume: catVolume("db", "hostpath", model.AccessModeSingleNodeWriter).Proto()})
	f.manager.Send(f.cat.PID(), &messages.ShutdownCatalog{})
	f.manager.Send(f.cat.PID(), &messages.RegisterVolume{Volume: catVolume("web", "hostpath", model.AccessModeSingleNodeWriter).Proto()})
	// The refusal is answered at once, the accepted write once durable, and
	// the shutdown once no write is left: their order depends on the disk.
	answers := map[string]proto.Message{}
	var order []string
	for range 3 {
		got := probe.Expect[proto.Message](t, f.manager, catWait)
		name := string(got.ProtoReflect().Descriptor().Name())
		if resp, ok := got.(*messages.RegisterVolumeResponse); ok && resp.GetError() == nil {
			name = "accepted"
		}
		answers[name] = got
		order = append(order, name)
	}
	require.Contains(t, answers, "accepted", "a write accepted before the shutdown is finished")
	require.Less(t, slices.Index(order, "accepted"), slices.Index(order, "ShutdownCatalogResponse"),
		"the shutdown is answered once the accepted write is durable")
	refused := answers["RegisterVolumeResponse"].(*messages.RegisterVolumeResponse)
	require.ErrorIs(t, messages.ErrorFromProto(refused.GetError()), catalog.ErrShutdown)
	require.Equal(t, "db", f.volume("", "db").ID, "queries still answer until the actor stops")

	require.NoError(t, f.cat.Shutdown(ctx))
	require.NoError(t, f.cat.Shutdown(ctx), "a second shutdown is a no-op")
	_, err := f.cat.GetVolume(ctx, "", "db")
	require.ErrorIs(t, err, catalog.ErrShutdown)
	require.ErrorIs(t, f.cat.Claim(ctx, catClaim("db", "a1", false)), catalog.ErrShutdown)
}

func TestCatalogStartRefusesABadConfig(t *testing.T) {
	system := probe.NewSystem(t)
	tests := []struct {
		name string
		cfg  catalog.Config
	}{
		{"no bucket", catalog.Config{NodeID: catNode}},
		{"no node ID", catalog.Config{Bucket: catMemoryBucket(t)}},
		{"a node ID that climbs out", catalog.Config{Bucket: catMemoryBucket(t), NodeID: "../node"}},
		{"a negative volume limit", catalog.Config{Bucket: catMemoryBucket(t), NodeID: catNode, MaxVolumes: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := catalog.Start(system, tt.cfg)
			require.ErrorIs(t, err, model.ErrInvalid)
		})
	}
}

func TestCatalogRefusesANewVolumeBeyondItsLimitAndChangesNothing(t *testing.T) {
	ctx := context.Background()
	bucket := catMemoryBucket(t)
	system := probe.NewSystem(t)
	cat, err := catalog.Start(system, catalog.Config{Bucket: bucket, NodeID: catNode, Logger: probe.Logger(t), MaxVolumes: 2})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cat.Shutdown(ctx)) })
	f := &catFixture{t: t, system: system, cat: cat}
	f.register(catVolume("a", "hostpath", model.AccessModeSingleNodeWriter))
	other := catVolume("b", "hostpath", model.AccessModeSingleNodeWriter)
	other.Namespace = "team"
	f.register(other) // the limit counts every namespace
	require.NoError(t, cat.CheckRoom("", "a"), "a volume already there has room")
	before := f.dump()

	err = cat.CheckRoom("", "c")
	require.ErrorIs(t, err, model.ErrVolumeLimit)
	_, err = cat.RegisterVolume(ctx, catVolume("c", "hostpath", model.AccessModeSingleNodeWriter))
	require.ErrorIs(t, err, model.ErrVolumeLimit)
	require.ErrorContains(t, err, "volume default/c: the catalog holds 2 volumes, the limit")
	require.ErrorContains(t, err, "agent flag -max-volumes", "the error names the flag that raises it")
	require.Equal(t, before, f.dump(), "the refusal changed nothing")

	changed := catVolume("a", "hostpath", model.AccessModeMultiNodeReader)
	require.Equal(t, model.AccessModeMultiNodeReader, f.register(changed).AccessMode, "a volume already there can change")

	require.NoError(t, cat.DeregisterVolume(ctx, "team", "b"))
	require.NoError(t, cat.CheckRoom("", "c"))
	f.register(catVolume("c", "hostpath", model.AccessModeSingleNodeWriter))
	stubs, err := cat.ListVolumes(ctx, "")
	require.NoError(t, err)
	require.Equal(t, []string{"default/a", "default/c"}, catStubNames(stubs))
}
