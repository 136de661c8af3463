package catalog_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/storage"
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

func catStubNames(stubs []*model.CSIVolumeStub) []string {
	names := make([]string, len(stubs))
	for i, s := range stubs {
		names[i] = s.Namespace + "/" + s.ID
	}
	return names
}
