package volumes_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/docker/go-plugins-helpers/volume"
	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/discovery"
	"github.com/plugvisor/plugvisor/dockervolume"
	"github.com/plugvisor/plugvisor/dockervolume/dockervolumetest"
	"github.com/plugvisor/plugvisor/dockervolume/localvolume"
	"github.com/plugvisor/plugvisor/dockervolume/volumes"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/registry/registrytest"
	"github.com/plugvisor/plugvisor/storage"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fastRetry retries as moby does, a hundred times faster.
var fastRetry = dockervolume.Retry{Within: 300 * time.Millisecond, First: 10 * time.Millisecond}

// volumesEnv is a registry with the reference volume plugin registered as
// "local", a bbolt store, and the volume service on both.
type volumesEnv struct {
	system   *actor.ActorSystem
	registry *registry.Registry
	dir      string // a short directory for sockets
	store    *storage.Bolt
	bucket   storage.Bucket
	volumes  *volumes.Service
	root     string
}

func newVolumesEnv(t *testing.T) *volumesEnv {
	t.Helper()
	e := &volumesEnv{system: probe.NewSystem(t)}
	dir, err := os.MkdirTemp("", "pv")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	e.dir = dir
	e.registry = registrytest.New(t, e.system, registry.Config{Logger: probe.Logger(t)})
	e.root = filepath.Join(e.dir, "vols")
	d, err := localvolume.New(e.root, hclog.NewNullLogger())
	require.NoError(t, err)
	socket := filepath.Join(e.dir, "local.sock")
	dockervolumetest.ServeAt(t, socket, volume.NewHandler(d))
	e.register(t, "local", "a1", socket)
	e.store, err = storage.OpenBolt(filepath.Join(e.dir, "state.db"), storage.BoltOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.store.Close()) })
	e.bucket, err = e.store.Bucket(volumes.Bucket)
	require.NoError(t, err)
	e.start(t)
	return e
}

// register registers a Docker volume plugin served at socket.
func (e *volumesEnv) register(t *testing.T, name, alloc, socket string) {
	t.Helper()
	require.NoError(t, e.registry.RegisterPlugin(&messages.PluginInfo{Type: dockervolume.PluginType, Name: name,
		AllocId: alloc, Connection: &messages.ConnectionInfo{SocketPath: socket}}))
}

// start starts the volume service on the env's store.
func (e *volumesEnv) start(t *testing.T) {
	t.Helper()
	v, err := volumes.Start(e.system, volumes.Config{
		Bucket: e.bucket, Drivers: volumes.RegistryDrivers{Registry: e.registry, Retry: fastRetry}, Logger: probe.Logger(t),
	})
	require.NoError(t, err)
	e.volumes = v
	t.Cleanup(func() { require.NoError(t, v.Shutdown()) })
}

func TestTheVolumeServiceHasDockerdsSemanticsAndKnowsItsMountsAfterARestart(t *testing.T) {
	e := newVolumesEnv(t)
	ctx := context.Background()
	v := e.volumes

	created, err := v.Create(ctx, "data", "local", map[string]string{"size": "1G"})
	require.NoError(t, err)
	require.Equal(t, "local", created.Driver)
	again, err := v.Create(ctx, "data", "local", nil)
	require.NoError(t, err, "creating an existing volume with its driver returns it")
	require.Equal(t, created.CreatedAt, again.CreatedAt)
	_, err = v.Create(ctx, "data", "other", nil)
	require.ErrorIs(t, err, volumes.ErrNameConflict)

	mp1, err := v.Mount(ctx, "data", "c1")
	require.NoError(t, err)
	require.Equal(t, filepath.Join(e.root, "data"), mp1)
	mp2, err := v.Mount(ctx, "data", "c2")
	require.NoError(t, err)
	require.Equal(t, mp1, mp2)
	_, err = v.Mount(ctx, "data", "c2")
	require.NoError(t, err, "a second mount by one ID is counted")

	info, err := v.Inspect(ctx, "data")
	require.NoError(t, err)
	require.Equal(t, map[string]int{"c1": 1, "c2": 2}, info.Mounts)
	require.Equal(t, dockervolume.ScopeLocal, info.Scope)

	require.NoError(t, v.Unmount(ctx, "data", "c1"))
	require.ErrorIs(t, v.Unmount(ctx, "data", "c1"), volumes.ErrNotMounted)
	require.ErrorIs(t, v.Remove(ctx, "data"), volumes.ErrVolumeInUse)

	// The agent restarts in the middle: the service knows its mounts.
	require.NoError(t, v.Shutdown())
	e.start(t)
	v = e.volumes
	info, err = v.Inspect(ctx, "data")
	require.NoError(t, err)
	require.Equal(t, map[string]int{"c2": 2}, info.Mounts)
	require.ErrorIs(t, v.Remove(ctx, "data"), volumes.ErrVolumeInUse, "still refused after the restart")

	require.NoError(t, v.Unmount(ctx, "data", "c2"))
	require.ErrorIs(t, v.Remove(ctx, "data"), volumes.ErrVolumeInUse, "c2 mounted twice, unmounted once")
	require.NoError(t, v.Unmount(ctx, "data", "c2"))
	path, err := v.Path(ctx, "data")
	require.NoError(t, err)
	require.Equal(t, mp1, path)
	require.NoError(t, v.Remove(ctx, "data"))
	_, err = os.Stat(mp1)
	require.ErrorIs(t, err, os.ErrNotExist, "the driver removed the volume")
	_, err = v.Inspect(ctx, "data")
	require.ErrorIs(t, err, dockervolume.ErrNoSuchVolume)
}

func TestListMergesEveryDriversVolumesWithItsScope(t *testing.T) {
	e := newVolumesEnv(t)
	ctx := context.Background()
	global := filepath.Join(e.dir, "g.sock")
	gd := dockervolumetest.NewMemDriver(dockervolume.ScopeGlobal)
	dockervolumetest.ServeAt(t, global, volume.NewHandler(gd))
	e.register(t, "shared", "g1", global)
	require.NoError(t, gd.Create(&volume.CreateRequest{Name: "made-outside"}))
	_, err := e.volumes.Create(ctx, "mine", "local", nil)
	require.NoError(t, err)

	list, err := e.volumes.List(ctx)
	require.NoError(t, err)
	require.Empty(t, list.Warnings)
	require.Len(t, list.Volumes, 2)
	require.Equal(t, "made-outside", list.Volumes[0].Name)
	require.Equal(t, "shared", list.Volumes[0].Driver)
	require.Equal(t, dockervolume.ScopeGlobal, list.Volumes[0].Scope)
	require.False(t, list.Volumes[0].Known)
	require.Equal(t, "mine", list.Volumes[1].Name)
	require.Equal(t, dockervolume.ScopeLocal, list.Volumes[1].Scope)
	require.True(t, list.Volumes[1].Known)

	// A volume only its driver knows is found by name, as dockerd finds it,
	// and mapped to that driver from its first mount on.
	info, err := e.volumes.Inspect(ctx, "made-outside")
	require.NoError(t, err)
	require.Equal(t, "shared", info.Driver)
	require.False(t, info.Known)
	_, err = e.volumes.Mount(ctx, "made-outside", "c1")
	require.NoError(t, err)
	info, err = e.volumes.Inspect(ctx, "made-outside")
	require.NoError(t, err)
	require.True(t, info.Known)
	require.Equal(t, map[string]int{"c1": 1}, info.Mounts)
	_, err = e.volumes.Create(ctx, "made-outside", "local", nil)
	require.ErrorIs(t, err, volumes.ErrNameConflict, "the name maps to its driver now")
	_, err = e.volumes.Mount(ctx, "nowhere", "c1")
	require.ErrorIs(t, err, dockervolume.ErrNoSuchVolume)
}

func TestBadVolumeRequestsAreRefusedAndChangeNothing(t *testing.T) {
	e := newVolumesEnv(t)
	ctx := context.Background()
	_, err := e.volumes.Create(ctx, "keep", "local", nil)
	require.NoError(t, err)
	long := strings.Repeat("a", dockervolume.MaxVolumeNameLen+1)
	tooMany := map[string]string{}
	for i := range dockervolume.MaxOptions + 1 {
		tooMany[strings.Repeat("k", i+1)] = "v"
	}
	for _, tc := range []struct {
		name string
		do   func() error
		want string
	}{
		{"a dot", func() error { _, err := e.volumes.Create(ctx, ".", "local", nil); return err }, `must not be "."`},
		{"two dots", func() error { _, err := e.volumes.Create(ctx, "..", "local", nil); return err }, `must not contain ".."`},
		{"a separator", func() error { _, err := e.volumes.Create(ctx, "a/b", "local", nil); return err }, "path separator"},
		{"a name over the limit", func() error { _, err := e.volumes.Create(ctx, long, "local", nil); return err }, "over the limit"},
		{"a NUL in the name", func() error { _, err := e.volumes.Create(ctx, "a\x00b", "local", nil); return err }, "use only letters"},
		{"a driver with a separator", func() error { _, err := e.volumes.Create(ctx, "vol", "../x", nil); return err }, "path separator"},
		{"an empty option key", func() error {
			_, err := e.volumes.Create(ctx, "vol", "local", map[string]string{"": "v"})
			return err
		}, "driver option key must not be empty"},
		{"a control character in an option", func() error {
			_, err := e.volumes.Create(ctx, "vol", "local", map[string]string{"k": "a\nb"})
			return err
		}, "without control characters"},
		{"too many options", func() error { _, err := e.volumes.Create(ctx, "vol", "local", tooMany); return err }, "driver options, over the limit"},
		{"an empty mount ID", func() error { _, err := e.volumes.Mount(ctx, "keep", ""); return err }, "mount ID must not be empty"},
		{"a mount ID with a space", func() error { _, err := e.volumes.Mount(ctx, "keep", "a b"); return err }, "spaces"},
		{"an unmount by a bad ID", func() error { return e.volumes.Unmount(ctx, "keep", "..") }, `must not be ".."`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			require.ErrorIs(t, err, dockervolume.ErrInvalidVolume)
			require.ErrorContains(t, err, tc.want)
		})
	}
	list, err := e.volumes.List(ctx)
	require.NoError(t, err)
	require.Len(t, list.Volumes, 1, "nothing was created")
	info, err := e.volumes.Inspect(ctx, "keep")
	require.NoError(t, err)
	require.Empty(t, info.Mounts, "nothing was mounted")
}

func TestAMountThatFailsLeavesNoRecordAndAMissingDriverSaysSo(t *testing.T) {
	e := newVolumesEnv(t)
	ctx := context.Background()
	_, err := e.volumes.Create(ctx, "data", "nobody", nil)
	require.ErrorIs(t, err, discovery.ErrNotFound)

	_, err = e.volumes.Create(ctx, "data", "local", nil)
	require.NoError(t, err)
	require.NoError(t, os.RemoveAll(filepath.Join(e.root, "data")))
	require.NoError(t, os.WriteFile(filepath.Join(e.root, "data"), nil, 0o644))
	_, err = e.volumes.Mount(ctx, "data", "c1")
	require.ErrorIs(t, err, discovery.ErrPluginFailed)
	info, err := e.volumes.Inspect(ctx, "data")
	require.NoError(t, err)
	require.Empty(t, info.Mounts)
	require.Empty(t, info.PendingMounts, "the pending record is gone with the failed call")
}

// A corrupt record stops the service from starting rather than guessing.
func TestACorruptRecordIsRefusedAtStart(t *testing.T) {
	e := newVolumesEnv(t)
	require.NoError(t, e.bucket.Apply([]storage.Op{storage.Put([]byte("volume/x"), []byte("garbage!"))}))
	_, err := volumes.Start(e.system, volumes.Config{
		Bucket: e.bucket, Drivers: volumes.RegistryDrivers{Registry: e.registry}, Name: "second",
	})
	require.ErrorIs(t, err, volumes.ErrCorruptRecord)
}

func TestStartVolumesRefusesABadConfig(t *testing.T) {
	_, err := volumes.Start(probe.NewSystem(t), volumes.Config{OpTimeout: -time.Second})
	require.ErrorIs(t, err, volumes.ErrInvalidConfig)
	require.ErrorContains(t, err, "Bucket is required")
	require.ErrorContains(t, err, "Drivers is required")
	require.ErrorContains(t, err, "OpTimeout is -1s")
}
