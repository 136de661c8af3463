package controller_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"go.uber.org/mock/gomock"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/controller"
	"github.com/plugvisor/plugvisor/csi/csitest"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
)

func TestMain(m *testing.M) {
	hostpathtest.Main(m)
}

// secretValue is the value of every secret in these tests: no error, log
// line or printed volume may contain it.
const secretValue = "s3cr3t-do-not-print"

const plugin = "disk"

// failingCatalog is the real catalog whose next RegisterVolume fails, as
// when the agent dies between CreateVolume and the registration.
type failingCatalog struct {
	*catalog.Catalog
	failNextRegister atomic.Bool
}

var errCrash = errors.New("the agent died here")

func (c *failingCatalog) RegisterVolume(ctx context.Context, v *model.CSIVolume) (*model.CSIVolume, error) {
	if c.failNextRegister.Swap(false) {
		return nil, errCrash
	}
	return c.Catalog.RegisterVolume(ctx, v)
}

// fixture is a controller over a real catalog and registry.
type fixture struct {
	t      *testing.T
	system *actor.ActorSystem
	cat    *failingCatalog
	reg    *registry.Registry
	ctl    *controller.Controller
	logs   *probe.LogBuffer
	expand *fakeExpander
}

// fakeExpander records the node expansions it is asked for.
type fakeExpander struct {
	mu    sync.Mutex
	calls []int64
}

func (e *fakeExpander) ExpandOnNodes(_ context.Context, _ *model.CSIVolume, capacity int64) (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls = append(e.calls, capacity)
	return true, nil
}

func newFixture(t *testing.T, tune func(*controller.Config)) *fixture {
	t.Helper()
	return newFixtureWithCatalog(t, catalog.Config{}, tune)
}

// newFixtureWithCatalog is newFixture with a catalog of catCfg (its
// bucket, node and logger filled in).
func newFixtureWithCatalog(t *testing.T, catCfg catalog.Config, tune func(*controller.Config)) *fixture {
	t.Helper()
	system := probe.NewSystem(t)
	mem := storage.NewMemory()
	catBucket, err := mem.Bucket(catalog.Bucket)
	require.NoError(t, err)
	catCfg.Bucket, catCfg.NodeID, catCfg.Logger = catBucket, "node-1", probe.Logger(t)
	cat, err := catalog.Start(system, catCfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cat.Shutdown(context.Background())) })
	regBucket, err := mem.Bucket(registry.BucketName)
	require.NoError(t, err)
	reg, err := registry.New(system, registry.Config{Bucket: regBucket, Logger: probe.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, reg.Shutdown()) })

	f := &fixture{t: t, system: system, cat: &failingCatalog{Catalog: cat}, reg: reg, logs: &probe.LogBuffer{}, expand: &fakeExpander{}}
	cfg := controller.Config{
		Catalog: f.cat, Plugins: reg, NodeExpander: f.expand,
		RPCTimeout: 10 * time.Second, OperationTimeout: 30 * time.Second,
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, Output: f.logs}),
	}
	if tune != nil {
		tune(&cfg)
	}
	f.ctl, err = controller.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NotContains(t, f.logs.String(), secretValue, "no log line carries a secret")
	})
	return f
}

// serveController registers a csi-controller allocation of plugin served by
// the mocks, whose ControllerGetCapabilities is expected by the test.
func (f *fixture) serveMocks() *csitest.Mocks {
	f.t.Helper()
	m := csitest.NewMocks(f.t)
	socket := csitest.SocketPath(f.t)
	m.Serve(f.t, socket)
	f.registerController(plugin, socket)
	return m
}

func (f *fixture) registerController(name, socket string) {
	f.t.Helper()
	require.NoError(f.t, f.reg.RegisterPlugin(&messages.PluginInfo{
		Type: csi.TypeController, Name: name, AllocId: "alloc-" + name,
		Connection: &messages.ConnectionInfo{SocketPath: socket},
	}))
}

// volumes lists the catalog's volumes with their plugin-side fields.
func (f *fixture) volumes() []*model.CSIVolume {
	f.t.Helper()
	ctx := context.Background()
	stubs, err := f.cat.ListVolumes(ctx, "")
	require.NoError(f.t, err)
	out := []*model.CSIVolume{}
	for _, s := range stubs {
		v, err := f.cat.GetVolume(ctx, s.Namespace, s.ID)
		require.NoError(f.t, err)
		out = append(out, v)
	}
	return out
}

// healthy tells the catalog the plugin's node service is healthy, so
// claims can be granted: the node stands in zone a and, as the hostpath
// plugin of hostpath_test.go sees it, at node-1.
func (f *fixture) healthy(name string) {
	f.t.Helper()
	fp := &messages.CSIFingerprint{
		Type: csi.TypeNode, Name: name, AllocId: "node-alloc", Healthy: true, HealthDescription: csi.HealthyDescription,
		PluginInfo: &messages.CSIPluginInfo{Name: name, VendorVersion: "1"}, NodeInfo: &messages.CSINodeInfo{NodeId: "n1",
			AccessibleTopology: map[string]string{"zone": "a", hostpath.TopologyKey: "node-1"}},
	}
	f.system.Root.Send(f.cat.PID(), &messages.CSIPluginFingerprinted{Fingerprint: fp})
	// The catalog answers writes in order, once durable: this refusal
	// comes after the fingerprint is applied.
	require.ErrorIs(f.t, f.cat.DeregisterVolume(context.Background(), "", "no-such-volume"), model.ErrVolumeNotFound)
}

func caps(types ...csipb.ControllerServiceCapability_RPC_Type) *csipb.ControllerGetCapabilitiesResponse {
	resp := &csipb.ControllerGetCapabilitiesResponse{}
	for _, t := range types {
		resp.Capabilities = append(resp.Capabilities, &csipb.ControllerServiceCapability{
			Type: &csipb.ControllerServiceCapability_Rpc{Rpc: &csipb.ControllerServiceCapability_RPC{Type: t}},
		})
	}
	return resp
}

const (
	createDelete = csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME
	expandCap    = csipb.ControllerServiceCapability_RPC_EXPAND_VOLUME
	snapshotCap  = csipb.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT
	listSnapCap  = csipb.ControllerServiceCapability_RPC_LIST_SNAPSHOTS
)

func expectCaps(m *csitest.Mocks, types ...csipb.ControllerServiceCapability_RPC_Type) *gomock.Call {
	return m.Controller.EXPECT().ControllerGetCapabilities(gomock.Any(), gomock.Any()).Return(caps(types...), nil)
}

// createRequest is a create of default/db on the mocks' plugin with every
// field set.
func createRequest() controller.CreateRequest {
	return controller.CreateRequest{
		ID: "db", PluginID: plugin, RequiredBytes: 1 << 20, LimitBytes: 4 << 20,
		Parameters: map[string]string{"tier": "fast"}, Secrets: map[string]string{"token": secretValue},
		AccessMode: model.AccessModeSingleNodeWriter, AttachmentMode: model.AttachmentModeFileSystem,
		MountOptions: &model.MountOptions{FSType: "ext4", MountFlags: []string{"noatime"}},
		Requisite:    []*model.Topology{{Segments: map[string]string{"zone": "a"}}},
	}
}

// wantCreateVolume is the exact CreateVolume request of createRequest.
func wantCreateVolume() *csipb.CreateVolumeRequest {
	return &csipb.CreateVolumeRequest{
		Name:          "db",
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 1 << 20, LimitBytes: 4 << 20},
		Parameters:    map[string]string{"tier": "fast"},
		Secrets:       map[string]string{"token": secretValue},
		VolumeCapabilities: []*csipb.VolumeCapability{{
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
			AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: "ext4", MountFlags: []string{"noatime"}}},
		}},
		AccessibilityRequirements: &csipb.TopologyRequirement{Requisite: []*csipb.Topology{{Segments: map[string]string{"zone": "a"}}}},
	}
}

func createdAnswer() *csipb.CreateVolumeResponse {
	return &csipb.CreateVolumeResponse{Volume: &csipb.Volume{
		VolumeId: "pv-123", CapacityBytes: 2 << 20, VolumeContext: map[string]string{"path": "/srv/pv-123"},
		AccessibleTopology: []*csipb.Topology{{Segments: map[string]string{"zone": "a"}}},
	}}
}

func TestCreateSendsTheExactRequestAndRegistersWhatThePluginAnswered(t *testing.T) {
	f := newFixture(t, nil)
	m := f.serveMocks()
	gomock.InOrder(
		expectCaps(m, createDelete),
		m.Controller.EXPECT().CreateVolume(gomock.Any(), csitest.ProtoEq(wantCreateVolume())).Return(createdAnswer(), nil),
	)
	v, err := f.ctl.Create(context.Background(), createRequest())
	require.NoError(t, err)
	got, err := f.cat.GetVolume(context.Background(), "", "db")
	require.NoError(t, err)
	require.Equal(t, v, got, "the answer is the registered volume")
	require.Equal(t, "pv-123", got.ExternalID)
	require.Equal(t, int64(2<<20), got.CapacityBytes)
	require.Equal(t, map[string]string{"path": "/srv/pv-123"}, got.Context)
	require.Equal(t, map[string]string{"tier": "fast"}, got.Parameters)
	require.Equal(t, secretValue, got.Secrets["token"], "the secrets are kept for later RPCs")
	require.Equal(t, []*model.Topology{{Segments: map[string]string{"zone": "a"}}}, got.Topologies)
	require.Equal(t, []*model.Topology{{Segments: map[string]string{"zone": "a"}}}, got.RequestedTopologies)
	require.True(t, got.Created)
	require.Equal(t, &model.MountOptions{FSType: "ext4", MountFlags: []string{"noatime"}}, got.MountOptions)
}

func TestCreateHealsACrashBetweenCreateVolumeAndTheRegistration(t *testing.T) {
	f := newFixture(t, nil)
	m := f.serveMocks()
	gomock.InOrder(
		expectCaps(m, createDelete),
		m.Controller.EXPECT().CreateVolume(gomock.Any(), csitest.ProtoEq(wantCreateVolume())).Return(createdAnswer(), nil),
		expectCaps(m, createDelete),
		m.Controller.EXPECT().CreateVolume(gomock.Any(), csitest.ProtoEq(wantCreateVolume())).Return(createdAnswer(), nil),
	)
	f.cat.failNextRegister.Store(true)
	_, err := f.ctl.Create(context.Background(), createRequest())
	require.ErrorIs(t, err, errCrash)
	require.Contains(t, err.Error(), `the plugin made volume "pv-123"`)
	require.Contains(t, err.Error(), "run the same create again")
	require.Empty(t, f.volumes(), "nothing was registered")

	v, err := f.ctl.Create(context.Background(), createRequest())
	require.NoError(t, err, "the same create again finishes it: CreateVolume is idempotent by name")
	require.Equal(t, "pv-123", v.ExternalID)
	require.Len(t, f.volumes(), 1)
}

func TestCreateFromASnapshotNeedsTheSnapshotCapability(t *testing.T) {
	f := newFixture(t, nil)
	m := f.serveMocks()
	expectCaps(m, createDelete)
	req := createRequest()
	req.SnapshotID = "snap-1"
	_, err := f.ctl.Create(context.Background(), req)
	require.ErrorIs(t, err, controller.ErrUnsupported)
	require.Contains(t, err.Error(), `plugin "disk" does not advertise CREATE_DELETE_SNAPSHOT`)
	require.Empty(t, f.volumes())
}

func TestCreateFromASnapshotSendsItAsTheContentSource(t *testing.T) {
	f := newFixture(t, nil)
	m := f.serveMocks()
	want := wantCreateVolume()
	want.VolumeContentSource = &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{
		Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: "snap-1"}}}
	gomock.InOrder(
		expectCaps(m, createDelete, snapshotCap),
		m.Controller.EXPECT().CreateVolume(gomock.Any(), csitest.ProtoEq(want)).Return(createdAnswer(), nil),
	)
	req := createRequest()
	req.SnapshotID = "snap-1"
	_, err := f.ctl.Create(context.Background(), req)
	require.NoError(t, err)
}

// created runs a create on the mocks and returns the volume.
func (f *fixture) created(m *csitest.Mocks) *model.CSIVolume {
	f.t.Helper()
	gomock.InOrder(
		expectCaps(m, createDelete),
		m.Controller.EXPECT().CreateVolume(gomock.Any(), gomock.Any()).Return(createdAnswer(), nil),
	)
	v, err := f.ctl.Create(context.Background(), createRequest())
	require.NoError(f.t, err)
	return v
}

func TestSnapshotsAreCreatedListedAndDeleted(t *testing.T) {
	f := newFixture(t, nil)
	m := f.serveMocks()
	f.created(m)
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	snap := &csipb.Snapshot{SnapshotId: "snap-9", SourceVolumeId: "pv-123", SizeBytes: 2 << 20, CreationTime: timestamppb.New(created), ReadyToUse: true}
	gomock.InOrder(
		expectCaps(m, snapshotCap),
		m.Controller.EXPECT().CreateSnapshot(gomock.Any(), csitest.ProtoEq(&csipb.CreateSnapshotRequest{
			SourceVolumeId: "pv-123", Name: "nightly", Parameters: map[string]string{"kind": "full"},
			Secrets: map[string]string{"token": secretValue},
		})).Return(&csipb.CreateSnapshotResponse{Snapshot: snap}, nil),
		expectCaps(m, listSnapCap),
		m.Controller.EXPECT().ListSnapshots(gomock.Any(), csitest.ProtoEq(&csipb.ListSnapshotsRequest{SourceVolumeId: "pv-123"})).
			Return(&csipb.ListSnapshotsResponse{Entries: []*csipb.ListSnapshotsResponse_Entry{{Snapshot: snap}}, NextToken: "page-2"}, nil),
		m.Controller.EXPECT().ListSnapshots(gomock.Any(), csitest.ProtoEq(&csipb.ListSnapshotsRequest{SourceVolumeId: "pv-123", StartingToken: "page-2"})).
			Return(&csipb.ListSnapshotsResponse{}, nil),
		expectCaps(m, snapshotCap),
		m.Controller.EXPECT().DeleteSnapshot(gomock.Any(), csitest.ProtoEq(&csipb.DeleteSnapshotRequest{SnapshotId: "snap-9"})).
			Return(nil, status.Error(codes.NotFound, "gone already")),
	)
	ctx := context.Background()
	s, err := f.ctl.CreateSnapshot(ctx, controller.SnapshotRequest{VolumeID: "db", Name: "nightly", Parameters: map[string]string{"kind": "full"}})
	require.NoError(t, err)
	want := controller.Snapshot{PluginID: plugin, ID: "snap-9", SourceVolumeID: "pv-123", SizeBytes: 2 << 20, CreationTime: created, ReadyToUse: true}
	require.Equal(t, want, s)
	list, err := f.ctl.ListSnapshots(ctx, controller.ListSnapshotsRequest{VolumeID: "db"})
	require.NoError(t, err)
	require.Equal(t, []controller.Snapshot{want}, list, "every page is followed")
	require.NoError(t, f.ctl.DeleteSnapshot(ctx, plugin, "snap-9", nil), "a snapshot the plugin does not know is deleted")
}

func TestAHangingPluginIsAnsweredWithinTheOperationDeadline(t *testing.T) {
	f := newFixture(t, func(c *controller.Config) { c.OperationTimeout = 3 * time.Second })
	m := f.serveMocks()
	gomock.InOrder(
		expectCaps(m, createDelete),
		m.Controller.EXPECT().CreateVolume(gomock.Any(), gomock.Any()).DoAndReturn(
			func(ctx context.Context, _ *csipb.CreateVolumeRequest) (*csipb.CreateVolumeResponse, error) {
				<-ctx.Done() // never answers by itself
				return nil, ctx.Err()
			}),
	)
	_, err := f.ctl.Create(context.Background(), createRequest())
	require.ErrorIs(t, err, csi.ErrDeadlineExceeded)
	require.Empty(t, f.volumes())
}

func TestACallerThatGoesAwayDoesNotStopTheOperation(t *testing.T) {
	f := newFixture(t, nil)
	m := f.serveMocks()
	ctx, cancel := context.WithCancel(context.Background())
	gomock.InOrder(
		expectCaps(m, createDelete),
		m.Controller.EXPECT().CreateVolume(gomock.Any(), gomock.Any()).DoAndReturn(
			func(context.Context, *csipb.CreateVolumeRequest) (*csipb.CreateVolumeResponse, error) {
				cancel() // the caller gives up while the plugin works
				return createdAnswer(), nil
			}),
	)
	_, err := f.ctl.Create(ctx, createRequest())
	require.NoError(t, err)
	require.Len(t, f.volumes(), 1, "the volume the plugin made is registered all the same")
}

// registerVolume registers (not creates) a volume id of the plugin.
func (f *fixture) registerVolume(id string) *model.CSIVolume {
	f.t.Helper()
	v := model.NewCSIVolume(id, 0)
	v.PluginID, v.AccessMode, v.AttachmentMode = plugin, model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem
	got, err := f.cat.RegisterVolume(context.Background(), v)
	require.NoError(f.t, err)
	return got
}

func TestCreateOverARegisteredVolumeIsRefusedBeforeAnyRPC(t *testing.T) {
	f := newFixture(t, nil)
	f.serveMocks() // no RPC is expected
	before := f.registerVolume("db")
	_, err := f.ctl.Create(context.Background(), createRequest())
	require.ErrorIs(t, err, controller.ErrVolumeExists)
	require.Contains(t, err.Error(), "created: false")
	require.Equal(t, []*model.CSIVolume{before}, f.volumes())
}

func TestCreateBeyondTheVolumeLimitIsRefusedBeforeAnyRPC(t *testing.T) {
	f := newFixtureWithCatalog(t, catalog.Config{MaxVolumes: 1}, nil)
	f.serveMocks() // no RPC is expected
	before := f.registerVolume("web")
	_, err := f.ctl.Create(context.Background(), createRequest())
	require.ErrorIs(t, err, model.ErrVolumeLimit)
	require.ErrorContains(t, err, "agent flag -max-volumes")
	require.Equal(t, []*model.CSIVolume{before}, f.volumes(), "nothing changed")
}

func TestAPluginWithoutAControllerIsRefused(t *testing.T) {
	f := newFixture(t, nil)
	_, err := f.ctl.Create(context.Background(), createRequest())
	require.ErrorIs(t, err, controller.ErrNoController)
	require.Contains(t, err.Error(), `no controller plugin: "disk" is not registered as csi-controller`)
}

func TestBadInputsAreRefusedBeforeAnyRPCAndChangeNothing(t *testing.T) {
	f := newFixture(t, nil)
	m := f.serveMocks() // any RPC fails the test: none is expected
	_ = m
	ctx := context.Background()
	create := func(change func(*controller.CreateRequest)) func() error {
		return func() error {
			req := createRequest()
			change(&req)
			_, err := f.ctl.Create(ctx, req)
			return err
		}
	}
	cases := []struct {
		name, field string
		do          func() error
	}{
		{"an empty volume ID", "volume ID", create(func(r *controller.CreateRequest) { r.ID = "" })},
		{"a volume ID with a slash", "volume ID", create(func(r *controller.CreateRequest) { r.ID = "a/b" })},
		{"a namespace of dots", "namespace", create(func(r *controller.CreateRequest) { r.Namespace = ".." })},
		{"no plugin", "plugin_id", create(func(r *controller.CreateRequest) { r.PluginID = "" })},
		{"a negative required size", "capacity.required_bytes", create(func(r *controller.CreateRequest) { r.RequiredBytes = -1 })},
		{"a limit below the required size", "capacity.limit_bytes", create(func(r *controller.CreateRequest) { r.LimitBytes = 1 })},
		{"an unknown access mode", "access_mode", create(func(r *controller.CreateRequest) { r.AccessMode = "everyone" })},
		{"an unknown attachment mode", "attachment_mode", create(func(r *controller.CreateRequest) { r.AttachmentMode = "floppy" })},
		{"a secret with an empty key", "secrets", create(func(r *controller.CreateRequest) { r.Secrets[""] = secretValue })},
		{"a requisite topology without segments", "topology.requisite[0]", create(func(r *controller.CreateRequest) { r.Requisite = []*model.Topology{{}} })},
		{"an fs type on a block device", "fs type", create(func(r *controller.CreateRequest) { r.AttachmentMode = model.AttachmentModeBlockDevice })},
		{"a snapshot ID with a newline", "snapshot_id", create(func(r *controller.CreateRequest) { r.SnapshotID = "a\nb" })},
		{"an expand without a size", "capacity.required_bytes", func() error { _, err := f.ctl.Expand(ctx, "", "db", 0, 0); return err }},
		{"an expand with a negative limit", "capacity.limit_bytes", func() error { _, err := f.ctl.Expand(ctx, "", "db", 5, -1); return err }},
		{"a delete of an empty ID", "volume ID", func() error { return f.ctl.Delete(ctx, "", "") }},
		{"a snapshot without a name", "name", func() error {
			_, err := f.ctl.CreateSnapshot(ctx, controller.SnapshotRequest{VolumeID: "db"})
			return err
		}},
		{"a snapshot list without plugin or volume", "plugin_id", func() error {
			_, err := f.ctl.ListSnapshots(ctx, controller.ListSnapshotsRequest{})
			return err
		}},
		{"a snapshot delete of an empty ID", "snapshot_id", func() error { return f.ctl.DeleteSnapshot(ctx, plugin, "", nil) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.do()
			require.ErrorIs(t, err, controller.ErrInvalidRequest)
			require.Contains(t, err.Error(), c.field, "the error names the field")
			require.NotContains(t, err.Error(), secretValue)
			require.Empty(t, f.volumes(), "nothing changed")
		})
	}
}

func TestNewRefusesABadConfig(t *testing.T) {
	for name, cfg := range map[string]controller.Config{
		"no catalog":         {Plugins: &registry.Registry{}},
		"no plugins":         {Catalog: &failingCatalog{}},
		"a negative timeout": {Catalog: &failingCatalog{}, Plugins: &registry.Registry{}, RPCTimeout: -time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := controller.New(cfg)
			require.ErrorIs(t, err, controller.ErrInvalidConfig)
			require.True(t, strings.HasPrefix(err.Error(), "invalid config: "))
		})
	}
}
