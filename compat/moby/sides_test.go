package moby_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/pkg/idtools"
	"github.com/docker/docker/pkg/plugingetter"
	"github.com/docker/docker/pkg/plugins"
	"github.com/docker/docker/volume/service"
	"github.com/docker/docker/volume/service/opts"
	"github.com/docker/go-plugins-helpers/volume"
	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/dockervolume"
	"github.com/plugvisor/plugvisor/dockervolume/localvolume"
	dockervolumes "github.com/plugvisor/plugvisor/dockervolume/volumes"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
)

// vol is what either service answers about a volume.
type vol struct{ Name, Driver, Scope string }

// side is one volume service under test. Its operations are plugvisor's;
// dockerd's side maps each to what the daemon does for a container (see
// dockerd).
type side interface {
	create(name, driver string) (vol, error)
	inspect(name string) (vol, error)
	mount(name, id string) error
	unmount(name, id string) error
	remove(name string, force bool) error
	// labels are the labels of volume name.
	labels(name string) (map[string]string, error)
	// list lists the volumes' names and the warnings.
	list() (names, warnings []string, err error)
	// gone makes the plugin p gone, as each service's plugins go: its
	// socket closes (dockerd), it is deregistered (plugvisor, whose
	// discovery deregisters a plugin whose socket goes).
	gone(p plugin)
	// notFound says whether err is the service's "no such volume".
	notFound(err error) bool
	// inUse says whether err is the service's "volume in use".
	inUse(err error) bool
}

// plugin is a Docker volume plugin both sides reach over a unix socket:
// each side has its own copy, so neither sees the other's volumes.
type plugin struct {
	name  string
	scope string
	// removeErr and mountErr, when set, are the plugin's own answers to
	// every Remove and every Mount.
	removeErr, mountErr string
	// stopped, when set, stops every copy once closed: the plugin is gone.
	stopped chan struct{}
}

// memDriver is an in-memory Docker volume plugin.
type memDriver struct {
	plugin
	dir  string
	mu   sync.Mutex
	vols map[string]bool
}

func (d *memDriver) Create(r *volume.CreateRequest) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.vols[r.Name] = true
	return nil
}

func (d *memDriver) List() (*volume.ListResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	resp := &volume.ListResponse{Volumes: []*volume.Volume{}}
	for name := range d.vols {
		resp.Volumes = append(resp.Volumes, &volume.Volume{Name: name})
	}
	return resp, nil
}

func (d *memDriver) Get(r *volume.GetRequest) (*volume.GetResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.vols[r.Name] {
		return nil, fmt.Errorf("no such volume %q", r.Name)
	}
	return &volume.GetResponse{Volume: &volume.Volume{Name: r.Name}}, nil
}

func (d *memDriver) Remove(r *volume.RemoveRequest) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.removeErr != "" {
		return errors.New(d.removeErr)
	}
	delete(d.vols, r.Name)
	return nil
}

func (d *memDriver) Path(r *volume.PathRequest) (*volume.PathResponse, error) {
	return &volume.PathResponse{Mountpoint: filepath.Join(d.dir, r.Name)}, nil
}

func (d *memDriver) Mount(r *volume.MountRequest) (*volume.MountResponse, error) {
	if d.mountErr != "" {
		return nil, errors.New(d.mountErr)
	}
	return &volume.MountResponse{Mountpoint: filepath.Join(d.dir, r.Name)}, nil
}

func (d *memDriver) Unmount(*volume.UnmountRequest) error { return nil }

func (d *memDriver) Capabilities() *volume.CapabilitiesResponse {
	return &volume.CapabilitiesResponse{Capabilities: volume.Capability{Scope: d.scope}}
}

// shortDir returns a directory for sockets, short enough for their paths.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pvm")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// serve serves d on a new socket in dir until the test ends, or until
// stopped (when not nil) is closed, and returns the socket's path.
func serve(t *testing.T, dir, name string, d volume.Driver, stopped chan struct{}) string {
	t.Helper()
	socket := filepath.Join(dir, name+".sock")
	ul, err := net.Listen("unix", socket)
	require.NoError(t, err)
	l := &closingListener{Listener: ul}
	done, end := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		_ = volume.NewHandler(d).Serve(l)
	}()
	go func() {
		select {
		case <-stopped:
		case <-end:
		}
		l.Close() // the socket and its connections are gone
	}()
	t.Cleanup(func() {
		close(end)
		<-done
	})
	return socket
}

// closingListener closes the connections it accepted when it is closed:
// a client's idle keep-alive connection would reach a plugin otherwise gone.
type closingListener struct {
	net.Listener
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

func (l *closingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	l.conns = append(l.conns, c)
	return c, nil
}

func (l *closingListener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for _, c := range l.conns {
		c.Close()
	}
	return l.Listener.Close()
}

// servePlugins serves a copy of each plugin and returns their sockets by name.
func servePlugins(t *testing.T, ps []plugin) map[string]string {
	t.Helper()
	dir := shortDir(t)
	sockets := map[string]string{}
	for _, p := range ps {
		sockets[p.name] = serve(t, dir, p.name, &memDriver{plugin: p, dir: filepath.Join(dir, p.name), vols: map[string]bool{}}, p.stopped)
	}
	return sockets
}

// dockerd is moby's own VolumesService, as the daemon builds it: its root
// directory, its built-in local driver, and the plugins of a PluginGetter.
// A container's volume is a reference to it (Create with the container's
// ID as reference) and a mount (Mount with a mount ID); removing the
// container unmounts it and releases the reference. plugvisor's mount ID
// is both: it holds the volume against removal as a reference does.
type dockerd struct {
	t  *testing.T
	vs *service.VolumesService
}

func newDockerd(t *testing.T, ps ...plugin) *dockerd {
	t.Helper()
	vs, err := service.NewVolumeService(t.TempDir(), pluginGetter(servePlugins(t, ps)),
		idtools.Identity{UID: os.Getuid(), GID: os.Getgid()}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, vs.Shutdown()) })
	return &dockerd{t: t, vs: vs}
}

func (d *dockerd) create(name, driver string) (vol, error) {
	v, err := d.vs.Create(context.Background(), name, driver)
	if err != nil {
		return vol{}, err
	}
	return vol{v.Name, v.Driver, v.Scope}, nil
}

func (d *dockerd) inspect(name string) (vol, error) {
	v, err := d.vs.Get(context.Background(), name)
	if err != nil {
		return vol{}, err
	}
	return vol{v.Name, v.Driver, v.Scope}, nil
}

func (d *dockerd) mount(name, id string) error {
	ctx := context.Background()
	v, err := d.vs.Get(ctx, name)
	if err != nil {
		return err
	}
	if _, err := d.vs.Create(ctx, name, v.Driver, opts.WithCreateReference(id)); err != nil {
		return err
	}
	_, err = d.vs.Mount(ctx, v, id)
	return err
}

func (d *dockerd) unmount(name, id string) error {
	ctx := context.Background()
	v, err := d.vs.Get(ctx, name)
	if err != nil {
		return err
	}
	if err := d.vs.Unmount(ctx, v, id); err != nil {
		return err
	}
	return d.vs.Release(ctx, name, id)
}

func (d *dockerd) remove(name string, force bool) error {
	return d.vs.Remove(context.Background(), name, opts.WithPurgeOnError(force))
}

func (d *dockerd) labels(name string) (map[string]string, error) {
	v, err := d.vs.Get(context.Background(), name)
	if err != nil {
		return nil, err
	}
	return v.Labels, nil
}

func (d *dockerd) list() (names, warnings []string, err error) {
	vols, warnings, err := d.vs.List(context.Background(), filters.NewArgs())
	for _, v := range vols {
		names = append(names, v.Name)
	}
	return names, warnings, err
}

func (d *dockerd) gone(p plugin) { close(p.stopped) }

func (d *dockerd) notFound(err error) bool { return service.IsNotExist(err) }
func (d *dockerd) inUse(err error) bool    { return service.IsInUse(err) }

// pluginGetter finds the plugins by name at their sockets, as the daemon's
// plugin store does for v1 plugins, with pkg/plugins' client.
type pluginGetter map[string]string

func (g pluginGetter) Get(name, _ string, _ int) (plugingetter.CompatPlugin, error) {
	socket, ok := g[name]
	if !ok {
		return nil, plugins.ErrNotFound
	}
	c, err := plugins.NewClient("unix://"+socket, nil)
	if err != nil {
		return nil, err
	}
	return v1Plugin{name: name, client: c}, nil
}

func (g pluginGetter) GetAllByCap(capability string) ([]plugingetter.CompatPlugin, error) {
	var all []plugingetter.CompatPlugin
	for name := range g {
		p, err := g.Get(name, capability, plugingetter.Lookup)
		if err != nil {
			return nil, err
		}
		all = append(all, p)
	}
	return all, nil
}

func (pluginGetter) GetAllManagedPluginsByCap(string) []plugingetter.CompatPlugin { return nil }
func (pluginGetter) Handle(string, func(string, *plugins.Client))                 {}

// v1Plugin is a legacy (v1) plugin reached by its client.
type v1Plugin struct {
	name   string
	client *plugins.Client
}

func (p v1Plugin) Name() string               { return p.name }
func (p v1Plugin) ScopedPath(s string) string { return s }
func (p v1Plugin) IsV1() bool                 { return true }
func (p v1Plugin) Client() *plugins.Client    { return p.client }

// plugvisor is plugvisor's volume service on its registry, with the
// reference local driver registered as "local" and the plugins beside it.
type plugvisor struct {
	volumes *dockervolumes.Service
	reg     *registry.Registry
}

func newPlugvisor(t *testing.T, ps ...plugin) *plugvisor {
	t.Helper()
	system := probe.NewSystem(t)
	bucket, err := storage.NewMemory().Bucket(registry.BucketName)
	require.NoError(t, err)
	reg, err := registry.New(system, registry.Config{Bucket: bucket, Logger: probe.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, reg.Shutdown()) })

	sockets := servePlugins(t, ps)
	local, err := localvolume.New(t.TempDir(), hclog.NewNullLogger())
	require.NoError(t, err)
	sockets["local"] = serve(t, shortDir(t), "local", local, nil)
	for name, socket := range sockets {
		require.NoError(t, reg.RegisterPlugin(&messages.PluginInfo{Type: dockervolume.PluginType, Name: name,
			AllocId: "a1", Connection: &messages.ConnectionInfo{SocketPath: socket}}))
	}

	store, err := storage.OpenBolt(filepath.Join(t.TempDir(), "state.db"), storage.BoltOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	volumes, err := store.Bucket(dockervolumes.Bucket)
	require.NoError(t, err)
	v, err := dockervolumes.Start(system, dockervolumes.Config{
		Bucket: volumes, Drivers: dockervolumes.RegistryDrivers{Registry: reg}, Logger: probe.Logger(t),
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, v.Shutdown()) })
	return &plugvisor{volumes: v, reg: reg}
}

func (p *plugvisor) create(name, driver string) (vol, error) {
	v, err := p.volumes.Create(context.Background(), name, driver, nil)
	return vol{v.Name, v.Driver, v.Scope}, err
}

func (p *plugvisor) inspect(name string) (vol, error) {
	v, err := p.volumes.Inspect(context.Background(), name)
	return vol{v.Name, v.Driver, v.Scope}, err
}

func (p *plugvisor) mount(name, id string) error {
	_, err := p.volumes.Mount(context.Background(), name, id)
	return err
}

func (p *plugvisor) unmount(name, id string) error {
	return p.volumes.Unmount(context.Background(), name, id)
}

func (p *plugvisor) remove(name string, force bool) error {
	if force {
		return p.volumes.ForceRemove(context.Background(), name)
	}
	return p.volumes.Remove(context.Background(), name)
}

func (p *plugvisor) labels(name string) (map[string]string, error) {
	v, err := p.volumes.Inspect(context.Background(), name)
	return v.Labels, err
}

func (p *plugvisor) list() (names, warnings []string, err error) {
	l, err := p.volumes.List(context.Background())
	for _, v := range l.Volumes {
		names = append(names, v.Name)
	}
	return names, l.Warnings, err
}

func (p *plugvisor) gone(pl plugin) {
	if err := p.reg.DeregisterPlugin(dockervolume.PluginType, pl.name, "a1"); err != nil {
		panic(err)
	}
}

func (p *plugvisor) notFound(err error) bool { return errors.Is(err, dockervolume.ErrNoSuchVolume) }
func (p *plugvisor) inUse(err error) bool    { return errors.Is(err, dockervolumes.ErrVolumeInUse) }
