// Package dockervolumetest helps the tests of Docker volume plugins and of
// the volume service: an in-memory volume plugin, and a server for it on a
// unix socket.
package dockervolumetest

import (
	"fmt"
	"net"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/volume"
)

// MemDriver is an in-memory volume.Driver: the plugin side of a test,
// served by go-plugins-helpers. It is safe for concurrent use.
type MemDriver struct {
	scope string
	mu    sync.Mutex
	vols  map[string]*memVolume
}

type memVolume struct {
	opts    map[string]string
	created time.Time
	mounts  map[string]bool // by caller ID
}

// NewMemDriver returns a driver with no volumes that reports scope in its
// capabilities.
func NewMemDriver(scope string) *MemDriver {
	return &MemDriver{scope: scope, vols: map[string]*memVolume{}}
}

func (d *MemDriver) mountpoint(name string) string {
	if len(d.vols[name].mounts) == 0 {
		return ""
	}
	return "/mnt/mem/" + name
}

// with runs f on volume name, under the lock. A missing volume is an error
// that the plugin sends back.
func (d *MemDriver) with(name string, f func(v *memVolume) error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.vols[name]
	if !ok {
		return fmt.Errorf("no such volume: %s", name)
	}
	return f(v)
}

func (d *MemDriver) describe(name string) *volume.Volume {
	v := d.vols[name]
	status := map[string]any{}
	for k, val := range v.opts {
		status[k] = val
	}
	return &volume.Volume{Name: name, Mountpoint: d.mountpoint(name), CreatedAt: v.created.Format(time.RFC3339), Status: status}
}

// Create implements volume.Driver. Every volume is created at the same
// time, 2026-01-02T03:04:05Z.
func (d *MemDriver) Create(r *volume.CreateRequest) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.vols[r.Name]; ok {
		return fmt.Errorf("volume %s already exists", r.Name)
	}
	d.vols[r.Name] = &memVolume{opts: r.Options, created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), mounts: map[string]bool{}}
	return nil
}

// List implements volume.Driver: the volumes sorted by name.
func (d *MemDriver) List() (*volume.ListResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	resp := &volume.ListResponse{Volumes: []*volume.Volume{}}
	for name := range d.vols {
		resp.Volumes = append(resp.Volumes, d.describe(name))
	}
	sort.Slice(resp.Volumes, func(i, j int) bool { return resp.Volumes[i].Name < resp.Volumes[j].Name })
	return resp, nil
}

// Get implements volume.Driver. A volume's status holds its options.
func (d *MemDriver) Get(r *volume.GetRequest) (*volume.GetResponse, error) {
	resp := &volume.GetResponse{}
	return resp, d.with(r.Name, func(*memVolume) error {
		resp.Volume = d.describe(r.Name)
		return nil
	})
}

// Remove implements volume.Driver. It refuses a volume that is mounted.
func (d *MemDriver) Remove(r *volume.RemoveRequest) error {
	return d.with(r.Name, func(v *memVolume) error {
		if len(v.mounts) > 0 {
			return fmt.Errorf("volume %s is in use", r.Name)
		}
		delete(d.vols, r.Name)
		return nil
	})
}

// Path implements volume.Driver: empty while nobody mounts the volume.
func (d *MemDriver) Path(r *volume.PathRequest) (*volume.PathResponse, error) {
	resp := &volume.PathResponse{}
	return resp, d.with(r.Name, func(*memVolume) error {
		resp.Mountpoint = d.mountpoint(r.Name)
		return nil
	})
}

// Mount implements volume.Driver. The mount point is /mnt/mem/<name>.
func (d *MemDriver) Mount(r *volume.MountRequest) (*volume.MountResponse, error) {
	resp := &volume.MountResponse{}
	return resp, d.with(r.Name, func(v *memVolume) error {
		v.mounts[r.ID] = true
		resp.Mountpoint = d.mountpoint(r.Name)
		return nil
	})
}

// Unmount implements volume.Driver. It refuses an ID that did not mount
// the volume.
func (d *MemDriver) Unmount(r *volume.UnmountRequest) error {
	return d.with(r.Name, func(v *memVolume) error {
		if !v.mounts[r.ID] {
			return fmt.Errorf("volume %s is not mounted by %s", r.Name, r.ID)
		}
		delete(v.mounts, r.ID)
		return nil
	})
}

// Capabilities implements volume.Driver.
func (d *MemDriver) Capabilities() *volume.CapabilitiesResponse {
	return &volume.CapabilitiesResponse{Capabilities: volume.Capability{Scope: d.scope}}
}

// ServeAt serves h on a unix socket at path until the test ends, or until
// the returned function stops it. Stopping removes the socket.
func ServeAt(t testing.TB, path string, h interface{ Serve(net.Listener) error }) (stop func()) {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatalf("serve a volume plugin at %s: %v", path, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = h.Serve(l)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			l.Close()
			<-done
		})
	}
	t.Cleanup(stop)
	return stop
}
