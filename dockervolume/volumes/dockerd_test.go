package volumes_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/volume"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/discovery"
	"github.com/plugvisor/plugvisor/dockervolume"
	"github.com/plugvisor/plugvisor/dockervolume/dockervolumetest"
	"github.com/plugvisor/plugvisor/dockervolume/volumes"
)

// These tests are the rows of docs/docker.md's table of differences from
// dockerd's volume service (moby v28.5.2, volume/service): each either
// matches dockerd or shows the stricter rule plugvisor keeps.

func TestAnUnmountByAnIDThatNeverMountedTheVolumeIsRefused(t *testing.T) {
	e := newVolumesEnv(t)
	ctx := context.Background()
	_, err := e.volumes.Create(ctx, "data", "local", nil)
	require.NoError(t, err)
	_, err = e.volumes.Mount(ctx, "data", "c1")
	require.NoError(t, err)
	// dockerd answers nil; a typo in an ID would then leave c1's mount
	// held with nobody told.
	require.ErrorIs(t, e.volumes.Unmount(ctx, "data", "c2"), volumes.ErrNotMounted)
	info, err := e.volumes.Inspect(ctx, "data")
	require.NoError(t, err)
	require.Equal(t, map[string]int{"c1": 1}, info.Mounts, "nothing changed")
}

func TestAnIDMountedTwiceHoldsTheVolumeUntilItsSecondUnmount(t *testing.T) {
	e := newVolumesEnv(t)
	ctx := context.Background()
	_, err := e.volumes.Create(ctx, "data", "local", nil)
	require.NoError(t, err)
	for range 2 {
		_, err = e.volumes.Mount(ctx, "data", "c1")
		require.NoError(t, err)
	}
	// dockerd releases c1's reference at the first unmount; the second
	// mount's holder would lose the volume under it.
	require.NoError(t, e.volumes.Unmount(ctx, "data", "c1"))
	require.ErrorIs(t, e.volumes.Remove(ctx, "data"), volumes.ErrVolumeInUse)
	require.NoError(t, e.volumes.Unmount(ctx, "data", "c1"))
	require.NoError(t, e.volumes.Remove(ctx, "data"))
}

func TestACreateWithoutADriverUsesLocalWhenItIsRegistered(t *testing.T) {
	e := newVolumesEnv(t)
	ctx := context.Background()
	v, err := e.volumes.Create(ctx, "data", "", nil)
	require.NoError(t, err)
	require.Equal(t, "local", v.Driver)
	require.DirExists(t, filepath.Join(e.root, "data"))

	require.NoError(t, e.volumes.Shutdown())
	other, err := volumes.Start(e.system, volumes.Config{Bucket: e.bucket,
		Drivers: volumes.RegistryDrivers{Registry: e.registry}, DefaultDriver: "nfs", Name: "nfs-default"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, other.Shutdown()) })
	_, err = other.Create(ctx, "more", "", nil)
	require.ErrorIs(t, err, dockervolume.ErrInvalidArgument)
	require.ErrorContains(t, err, `the default driver "nfs" is not registered; name one`)
	require.NoDirExists(t, filepath.Join(e.root, "more"))
}

func TestACreateWithoutANameMakesAnAnonymousVolume(t *testing.T) {
	e := newVolumesEnv(t)
	ctx := context.Background()
	a, err := e.volumes.Create(ctx, "", "local", nil)
	require.NoError(t, err)
	require.Regexp(t, `^[0-9a-f]{64}$`, a.Name)
	require.DirExists(t, filepath.Join(e.root, a.Name))
	b, err := e.volumes.Create(ctx, "", "local", nil)
	require.NoError(t, err)
	require.NotEqual(t, a.Name, b.Name, "each anonymous volume is new")
	require.Equal(t, map[string]string{volumes.AnonymousLabel: ""}, a.Labels, "labelled anonymous, as dockerd labels one")
	got, err := e.volumes.Inspect(ctx, a.Name)
	require.NoError(t, err)
	require.Equal(t, a.Labels, got.Labels, "kept in the record")
	named, err := e.volumes.Create(ctx, "data", "local", nil)
	require.NoError(t, err)
	require.Empty(t, named.Labels, "a named volume is not anonymous")
}

// TestAListWhileAVolumesDriverIsGoneListsItsRecordWithAWarning: as dockerd
// warns of a driver it cannot reach, the list names a driver that is gone
// (deregistered) while the service knows volumes of it, and lists those
// volumes from their records, without a scope. It does not wait for the
// driver to come back, as dockerd does (15 s): inspect does.
func TestAListWhileAVolumesDriverIsGoneListsItsRecordWithAWarning(t *testing.T) {
	e := newVolumesEnv(t)
	ctx := context.Background()
	e.serveMem(t, "cluster", "g1", volume.NewHandler(dockervolumetest.NewMemDriver("global")))
	_, err := e.volumes.Create(ctx, "shared", "cluster", nil)
	require.NoError(t, err)
	require.NoError(t, e.registry.DeregisterPlugin(dockervolume.PluginType, "cluster", "g1"))

	list, err := e.volumes.List(ctx)
	require.NoError(t, err)
	require.Len(t, list.Volumes, 1)
	require.Equal(t, "shared", list.Volumes[0].Name)
	require.Empty(t, list.Volumes[0].Scope)
	require.Len(t, list.Warnings, 1)
	require.Contains(t, list.Warnings[0], `driver "cluster": `)
	require.Contains(t, list.Warnings[0], "its volumes are listed as their records have them")
}

func TestTheCreateAnswerHasTheDriversScope(t *testing.T) {
	e := newVolumesEnv(t)
	ctx := context.Background()
	e.serveMem(t, "cluster", "g1", volume.NewHandler(dockervolumetest.NewMemDriver("global")))
	v, err := e.volumes.Create(ctx, "shared", "cluster", nil)
	require.NoError(t, err)
	require.Equal(t, dockervolume.ScopeGlobal, v.Scope)
	again, err := e.volumes.Create(ctx, "shared", "cluster", nil)
	require.NoError(t, err)
	require.Equal(t, dockervolume.ScopeGlobal, again.Scope, "and so has the answer about an existing one")
}

func TestForceRemoveDropsTheRecordAndAnswersTheDriversErrorButKeepsAVolumeInUse(t *testing.T) {
	e := newVolumesEnv(t)
	ctx := context.Background()
	require.NoError(t, e.volumes.ForceRemove(ctx, "never"), "no such volume is no error")

	socket := filepath.Join(e.dir, "g.sock")
	stop := dockervolumetest.ServeAt(t, socket, volume.NewHandler(dockervolumetest.NewMemDriver("local")))
	e.register(t, "flaky", "f1", socket)
	_, err := e.volumes.Create(ctx, "data", "flaky", nil)
	require.NoError(t, err)
	_, err = e.volumes.Create(ctx, "busy", "local", nil)
	require.NoError(t, err)
	_, err = e.volumes.Mount(ctx, "busy", "c1")
	require.NoError(t, err)

	stop() // the driver is gone
	require.ErrorIs(t, e.volumes.Remove(ctx, "data"), discovery.ErrUnreachable, "without force the record stays")
	require.ErrorIs(t, e.volumes.ForceRemove(ctx, "data"), discovery.ErrUnreachable,
		"the driver's error is answered, as dockerd answers it")
	_, err = e.volumes.Inspect(ctx, "data")
	require.ErrorIs(t, err, dockervolume.ErrNoSuchVolume)

	require.ErrorIs(t, e.volumes.ForceRemove(ctx, "busy"), volumes.ErrVolumeInUse, "force does not unmount")
	require.DirExists(t, filepath.Join(e.root, "busy"))
}

// waitingDrivers is RegistryDrivers whose Driver waits for back, as
// discovery's lookup waits for a plugin to come back.
type waitingDrivers struct {
	volumes.RegistryDrivers
	asked chan string
	back  chan struct{}
}

func (d waitingDrivers) Driver(ctx context.Context, name string) (*dockervolume.Client, error) {
	d.asked <- name
	select {
	case <-d.back:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return d.RegistryDrivers.Driver(ctx, name)
}

func TestInspectWaitsForADriverThatIsGoneAndAnswersTheRecordWhenItStaysGone(t *testing.T) {
	e := newVolumesEnv(t)
	ctx := context.Background()
	_, err := e.volumes.Create(ctx, "data", "local", nil)
	require.NoError(t, err)
	require.NoError(t, e.volumes.Shutdown())
	drivers := waitingDrivers{RegistryDrivers: volumes.RegistryDrivers{Registry: e.registry},
		asked: make(chan string, 1), back: make(chan struct{})}
	v, err := volumes.Start(e.system, volumes.Config{Bucket: e.bucket, Drivers: drivers,
		Logger: probe.Logger(t), Name: "waiting", OpTimeout: time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, v.Shutdown()) })

	answered := make(chan volumes.Volume, 1)
	go func() {
		info, err := v.Inspect(ctx, "data")
		require.NoError(t, err)
		answered <- info
	}()
	require.Equal(t, "local", <-drivers.asked, "the inspect waits for its driver")
	require.Empty(t, answered, "and does not answer while it waits")
	close(drivers.back)
	info := <-answered
	require.Equal(t, dockervolume.ScopeLocal, info.Scope)
	require.Empty(t, info.Error)

	// A driver that stays gone: the wait ends, and the answer is the record.
	short, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	gone := waitingDrivers{RegistryDrivers: drivers.RegistryDrivers, asked: make(chan string, 1), back: make(chan struct{})}
	require.NoError(t, v.Shutdown())
	v2, err := volumes.Start(e.system, volumes.Config{Bucket: e.bucket, Drivers: gone,
		Logger: probe.Logger(t), Name: "gone", OpTimeout: 500 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, v2.Shutdown()) })
	info, err = v2.Inspect(short, "data")
	require.NoError(t, err)
	require.Equal(t, "local", info.Driver)
	require.True(t, info.Known)
	require.Contains(t, info.Error, "deadline exceeded")
}

// refusingMount is an in-memory driver whose every Mount fails.
type refusingMount struct{ *dockervolumetest.MemDriver }

func (refusingMount) Mount(*volume.MountRequest) (*volume.MountResponse, error) {
	return nil, errors.New("no such device")
}

// TestAMountTheDriverRefusesHoldsNothing: dockerd keeps the reference the
// container took before its mount failed (a remove is 409 until the
// container goes); here a mount ID is reference and mount at once, and a
// mount the driver refused holds nothing: the volume is removed.
func TestAMountTheDriverRefusesHoldsNothing(t *testing.T) {
	e := newVolumesEnv(t)
	ctx := context.Background()
	e.serveMem(t, "flaky", "f1", volume.NewHandler(refusingMount{dockervolumetest.NewMemDriver("local")}))
	_, err := e.volumes.Create(ctx, "data", "flaky", nil)
	require.NoError(t, err)
	_, err = e.volumes.Mount(ctx, "data", "c1")
	require.ErrorContains(t, err, "no such device")
	v, err := e.volumes.Inspect(ctx, "data")
	require.NoError(t, err)
	require.Empty(t, v.Mounts)
	require.Empty(t, v.PendingMounts)
	require.NoError(t, e.volumes.Remove(ctx, "data"))
}

// TestAVolumeNameIsCheckedAsDockersLocalDriverChecksItForEveryDriver:
// dockerd gives a driver other than local any name; here every driver's
// volume names follow the local driver's rule, so ".", "..", "a b" and
// "-x" are refused for a plugin driver too, naming the rule, before the
// driver hears of them.
func TestAVolumeNameIsCheckedAsDockersLocalDriverChecksItForEveryDriver(t *testing.T) {
	e := newVolumesEnv(t)
	ctx := context.Background()
	driver := dockervolumetest.NewMemDriver("local")
	e.serveMem(t, "other", "o1", volume.NewHandler(driver))
	for _, name := range []string{".", "..", "a b", "-x"} {
		_, err := e.volumes.Create(ctx, name, "other", nil)
		require.ErrorIs(t, err, dockervolume.ErrInvalidVolume, name)
	}
	list, err := driver.List()
	require.NoError(t, err)
	require.Empty(t, list.Volumes, "the driver heard of none")
}

// serveMem serves h on a socket of its own, registered as the driver
// name's allocation alloc.
func (e *volumesEnv) serveMem(t *testing.T, name, alloc string, h *volume.Handler) {
	t.Helper()
	socket := filepath.Join(e.dir, name+".sock")
	dockervolumetest.ServeAt(t, socket, h)
	e.register(t, name, alloc, socket)
}
