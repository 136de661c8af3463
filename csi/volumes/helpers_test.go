package volumes_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
	"github.com/plugvisor/plugvisor/supervisor/supervisortest"
)

func TestMain(m *testing.M) {
	hostpathtest.Main(m, goleak.IgnoreTopFunction("github.com/golang/glog.(*fileSink).flushDaemon"))
}

// wait bounds how long a test waits for what must happen.
const wait = 20 * time.Second

// ctx is the context of the tests' calls.
var ctx = context.Background()

// modelCatalog is a Catalog for tests: the catalog model's own claim rules
// (csi/catalog) over volumes held in memory, on node "n1".
type modelCatalog struct {
	mu       sync.Mutex
	volumes  map[string]*model.CSIVolume
	external map[string]string
	// releases records every ReleaseClaim, in order.
	releases []model.Claim
}

func newModelCatalog() *modelCatalog {
	return &modelCatalog{volumes: map[string]*model.CSIVolume{}, external: map[string]string{}}
}

// add registers a volume of the default namespace with the plugin's
// volume ID external.
func (c *modelCatalog) add(id, external, plugin string, access model.AccessMode, attach model.AttachmentMode) {
	c.addIn("default", id, external, plugin, access, attach)
}

// addIn registers a volume of namespace ns.
func (c *modelCatalog) addIn(ns, id, external, plugin string, access model.AccessMode, attach model.AttachmentMode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := model.NewCSIVolume(id, 1)
	v.Namespace, v.PluginID, v.AccessMode, v.AttachmentMode, v.Schedulable = ns, plugin, access, attach, true
	c.volumes[ns+"/"+id] = v
	c.external[ns+"/"+id] = external
}

func (c *modelCatalog) GetVolume(_ context.Context, ns, id string) (*model.CSIVolume, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.volumes[ns+"/"+id]
	if !ok {
		return nil, fmt.Errorf("%w: %s/%s", volumes.ErrVolumeNotFound, ns, id)
	}
	out := v.Copy()
	out.ExternalID, out.PastClaims = c.external[ns+"/"+id], nil
	out.Context, out.Secrets = map[string]string{"k": "v"}, model.Secrets{"password": "s3cret"}
	return out, nil
}

func (c *modelCatalog) ClaimVolume(_ context.Context, req csi.ClaimRequest) (*model.CSIVolume, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.volumes[req.Namespace+"/"+req.VolumeID]
	if !ok {
		return nil, volumes.ErrVolumeNotFound
	}
	if err := v.Claim(&model.Claim{AllocID: req.AllocID, NodeID: "n1", Mode: req.Mode(), State: model.ClaimStateTaken,
		AccessMode: req.Usage.AccessMode, AttachmentMode: req.Usage.AttachmentMode}); err != nil {
		return nil, fmt.Errorf("%w: %w", volumes.ErrClaimRefused, err)
	}
	return v.Copy(), nil
}

func (c *modelCatalog) ReleaseVolume(_ context.Context, ns, id string, r *model.Claim) (*model.CSIVolume, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.releases = append(c.releases, *r)
	v, ok := c.volumes[ns+"/"+id]
	if !ok {
		return nil, nil
	}
	held := v.WriteClaims[r.AllocID]
	if held == nil {
		held = v.ReadClaims[r.AllocID]
	}
	if held == nil {
		return v.Copy(), nil
	}
	c2 := held.Copy()
	c2.State = r.State
	if err := v.ClaimRelease(c2); err != nil {
		return nil, err
	}
	return v.Copy(), nil
}

// claims returns the sorted writers and readers of a volume, and its past
// claims' states.
func (c *modelCatalog) claims(id string) (writers, readers []string, past map[string]model.ClaimState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.volumes["default/"+id]
	past = map[string]model.ClaimState{}
	for a, cl := range v.PastClaims {
		past[a] = cl.State
	}
	return slices.Sorted(maps.Keys(v.WriteClaims)), slices.Sorted(maps.Keys(v.ReadClaims)), past
}

// node is one test's node: a registry (which outlives manager restarts),
// a bbolt file, a root, a catalog, and the current volume manager.
type node struct {
	t        testing.TB
	dir      string
	root     string
	dbPath   string
	regSys   *actor.ActorSystem
	registry *registry.Registry
	catalog  *modelCatalog
	cfg      volumes.Config

	store   *storage.Bolt
	system  *actor.ActorSystem
	manager *volumes.Manager
	// current is manager, for goroutines other than the test's; onStart,
	// when set, is called with each manager started.
	current atomic.Pointer[volumes.Manager]
	onStart func(*volumes.Manager)
	// wrapBucket, when set, wraps the manager's bucket at each start.
	wrapBucket func(storage.Bucket) storage.Bucket
}

// newNode starts a node with a volume manager; tune changes its config.
func newNode(t testing.TB, tune func(*volumes.Config)) *node {
	t.Helper()
	dir := hostpathtest.TempDir(t)
	n := &node{t: t, dir: dir, root: filepath.Join(dir, "root"), dbPath: filepath.Join(dir, "state.db"), catalog: newModelCatalog()}
	n.regSys = probe.NewSystem(t)
	bucket, err := storage.NewMemory().Bucket(registry.BucketName)
	require.NoError(t, err)
	n.registry, err = registry.New(n.regSys, registry.Config{Bucket: bucket, Logger: probe.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, n.registry.Shutdown()) })
	n.cfg = volumes.Config{
		Catalog: n.catalog, Registry: n.registry, Root: n.root, Logger: probe.Logger(t),
		RPCTimeout: 10 * time.Second, OperationTimeout: wait,
	}
	if tune != nil {
		tune(&n.cfg)
	}
	n.start()
	t.Cleanup(n.stop)
	return n
}

// newHostpathNode starts a node whose manager writes its records through
// wrap, and the in-process hostpath plugin "hp" (logging to logger, nil
// for the test's log) registered as its node plugin.
func newHostpathNode(t testing.TB, wrap func(storage.Bucket) storage.Bucket, logger hclog.Logger) (*node, *hostpathtest.Server) {
	t.Helper()
	n := newNode(t, nil)
	n.wrapBucket = wrap
	n.restart()
	plugin := hostpathtest.Serve(t, hostpath.Config{Name: "hp", NodeID: "n1", Root: filepath.Join(n.dir, "hp"), Logger: logger})
	n.register(volumes.NodePluginType, "hp", "a1", plugin.Endpoint)
	return n, plugin
}

// newStrictNode starts a node whose manager runs on clock (nil for the
// real one), with the strict plugin "hp" and, created on it, the
// single-node-writer volumes ids.
func newStrictNode(t *testing.T, clock *supervisortest.FakeClock, ids ...string) (*node, *strictPlugin) {
	t.Helper()
	n := newNode(t, func(c *volumes.Config) {
		if clock != nil {
			c.Clock = clock
		}
	})
	p := newStrictPlugin(t, n, "hp")
	for _, id := range ids {
		p.create(n, id, "hp", model.AccessModeSingleNodeWriter)
	}
	return n, p
}

// mount mounts volume id of the default namespace for alloc, read-write.
func (n *node) mount(id, alloc string) volumes.MountResult {
	n.t.Helper()
	res, err := n.manager.Mount(ctx, "", id, alloc, false)
	require.NoError(n.t, err)
	return res
}

// stagingDir is where n stages volume id of the default namespace for
// plugin "hp".
func (n *node) stagingDir(id string) string {
	return filepath.Join(n.root, "hp", volumes.StagingDirName, "default", id)
}

// start opens the store and starts a manager in the node's actor system
// (where the registry runs too, so that the manager can subscribe to it).
func (n *node) start() {
	n.t.Helper()
	var err error
	n.store, err = storage.OpenBolt(n.dbPath, storage.BoltOptions{})
	require.NoError(n.t, err)
	bucket, err := n.store.Bucket(volumes.Bucket)
	require.NoError(n.t, err)
	n.system = n.regSys
	cfg := n.cfg
	cfg.Bucket = bucket
	if n.wrapBucket != nil {
		cfg.Bucket = n.wrapBucket(bucket)
	}
	n.manager, err = volumes.Start(n.system, cfg)
	require.NoError(n.t, err)
	n.current.Store(n.manager)
	if n.onStart != nil {
		n.onStart(n.manager)
	}
}

// stop shuts the manager down and closes the store.
func (n *node) stop() {
	if n.manager == nil {
		return
	}
	n.current.Store(nil)
	require.NoError(n.t, n.manager.Shutdown(context.Background()))
	require.NoError(n.t, n.store.Close())
	n.manager = nil
}

// restart stops the manager cleanly and starts a new one on the same file.
func (n *node) restart() {
	n.t.Helper()
	n.stop()
	n.start()
}

// restartWith stops the manager cleanly, changes its config with tune,
// and starts a new one on the same file.
func (n *node) restartWith(tune func(*volumes.Config)) {
	n.t.Helper()
	n.stop()
	tune(&n.cfg)
	n.start()
}

// crash closes the store under the running manager, so that nothing it
// does from then on is durable and it sends no further RPC (a job whose
// write fails stops), as when the agent is killed; release then lets a
// blocked RPC end, and the old manager is shut down, which cancels what
// it still runs. A new manager starts on the same file.
func (n *node) crash(release func()) {
	n.t.Helper()
	require.NoError(n.t, n.store.Close())
	if release != nil {
		release()
	}
	require.NoError(n.t, n.manager.Shutdown(context.Background()))
	n.start()
}

// register registers a plugin of type ptype and name at socket.
func (n *node) register(ptype, name, alloc, socket string) {
	n.t.Helper()
	require.NoError(n.t, n.registry.RegisterPlugin(&messages.PluginInfo{Type: ptype, Name: name, AllocId: alloc,
		Connection: &messages.ConnectionInfo{SocketPath: socket}}))
}

// status is the manager's status of a volume.
func (n *node) status(id string) volumes.Status {
	n.t.Helper()
	st, err := n.manager.Status(ctx, "default", id)
	require.NoError(n.t, err)
	return st
}

// settle waits until no operation runs on the volume and returns its status.
func (n *node) settle(id string) volumes.Status {
	n.t.Helper()
	var st volumes.Status
	require.Eventually(n.t, func() bool {
		st = n.status(id)
		return !st.Busy
	}, wait, 5*time.Millisecond)
	return st
}

// requireNoWriter checks that volume id has no write claim in the catalog.
func (n *node) requireNoWriter(id string, msgAndArgs ...any) {
	n.t.Helper()
	writers, _, _ := n.catalog.claims(id)
	require.Empty(n.t, writers, msgAndArgs...)
}

// fakeClock is a fake clock at a fixed start, for the tests that step
// retries, sweeps and the GC by hand.
func fakeClock() *supervisortest.FakeClock {
	return supervisortest.NewFakeClock(time.Unix(1_000_000, 0))
}

// socketPath is a socket path short enough for sun_path.
func socketPath(t *testing.T, name string) string {
	return filepath.Join(hostpathtest.TempDir(t), name+".sock")
}

// exists reports whether path exists.
func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
