// Package localvolume is a small reference Docker volume plugin: a volume
// is a directory under a root. It speaks Docker's VolumeDriver protocol
// through github.com/docker/go-plugins-helpers, on a unix socket. The
// plugvisor demo runs it as `plugvisor docker-volume-plugin`; it is also a
// ready peer for tests of Docker-protocol discovery.
package localvolume

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/docker/go-plugins-helpers/volume"
	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/plugvisor/plugvisor/dockervolume"
	"github.com/plugvisor/plugvisor/internal/cli"
	"github.com/plugvisor/plugvisor/names"
)

// Driver keeps volumes as directories under Root and counts their mounts.
type Driver struct {
	root string
	log  hclog.Logger

	mu      sync.Mutex
	created map[string]time.Time
	mounts  map[string]map[string]bool // volume → mount IDs
}

// New returns a driver keeping volumes under root, creating it if needed.
// Volumes already there are known again.
func New(root string, log hclog.Logger) (*Driver, error) {
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("localvolume: root %q must be absolute", root)
	}
	root = filepath.Clean(root)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("localvolume: %w", err)
	}
	d := &Driver{root: root, log: log, created: map[string]time.Time{}, mounts: map[string]map[string]bool{}}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("localvolume: %w", err)
	}
	for _, e := range entries {
		if dockervolume.ValidateVolumeName(e.Name()) != nil {
			continue
		}
		if info, err := e.Info(); err == nil && e.IsDir() {
			d.created[e.Name()] = info.ModTime()
		}
	}
	return d, nil
}

// path returns the directory of volume name: always one entry directly
// under the root. Names are checked by dockervolume.ValidateVolumeName,
// which refuses ".", "..", separators and anything but [a-zA-Z0-9_.-]; the
// joined path is checked once more to be a child of the root, and an entry
// there that is not a plain directory (a symlink, a file) is refused, so
// the driver never touches anything outside one volume's directory.
func (d *Driver) path(name string) (string, error) {
	if err := dockervolume.ValidateVolumeName(name); err != nil {
		return "", fmt.Errorf("localvolume: %w", err)
	}
	p := filepath.Join(d.root, name)
	if filepath.Dir(p) != d.root || filepath.Base(p) != name {
		return "", fmt.Errorf("localvolume: volume name %q does not name one directory under the root", name)
	}
	if fi, err := os.Lstat(p); err == nil && !fi.IsDir() {
		return "", fmt.Errorf("localvolume: %s is %v, not a directory: refusing to use it as volume %q", p, fi.Mode().Type(), name)
	}
	return p, nil
}

// known returns the path of an existing volume, or an error naming it.
func (d *Driver) known(name string) (string, error) {
	p, err := d.path(name)
	if err != nil {
		return "", err
	}
	if _, ok := d.created[name]; !ok {
		return "", fmt.Errorf("localvolume: no such volume %q", name)
	}
	return p, nil
}

// Create makes the volume's directory; creating an existing one is fine.
func (d *Driver) Create(r *volume.CreateRequest) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, err := d.path(r.Name)
	if err != nil {
		return err
	}
	if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("localvolume: create %q: %w", r.Name, err)
	}
	if _, ok := d.created[r.Name]; !ok {
		d.created[r.Name] = time.Now()
		d.log.Info("volume created", "volume", r.Name, "path", p)
	}
	return nil
}

func (d *Driver) describe(name string) *volume.Volume {
	return &volume.Volume{Name: name, Mountpoint: filepath.Join(d.root, name),
		CreatedAt: d.created[name].UTC().Format(time.RFC3339)}
}

// List returns every volume, sorted by name.
func (d *Driver) List() (*volume.ListResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	names := make([]string, 0, len(d.created))
	for n := range d.created {
		names = append(names, n)
	}
	sort.Strings(names)
	out := &volume.ListResponse{}
	for _, n := range names {
		out.Volumes = append(out.Volumes, d.describe(n))
	}
	return out, nil
}

// Get describes one volume.
func (d *Driver) Get(r *volume.GetRequest) (*volume.GetResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.known(r.Name); err != nil {
		return nil, err
	}
	return &volume.GetResponse{Volume: d.describe(r.Name)}, nil
}

// Remove deletes an unmounted volume and its data.
func (d *Driver) Remove(r *volume.RemoveRequest) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, err := d.known(r.Name)
	if err != nil {
		return err
	}
	if len(d.mounts[r.Name]) > 0 {
		return fmt.Errorf("localvolume: volume %q is mounted %d times", r.Name, len(d.mounts[r.Name]))
	}
	if err := os.RemoveAll(p); err != nil {
		return fmt.Errorf("localvolume: remove %q: %w", r.Name, err)
	}
	delete(d.created, r.Name)
	d.log.Info("volume removed", "volume", r.Name)
	return nil
}

// Path returns the volume's directory.
func (d *Driver) Path(r *volume.PathRequest) (*volume.PathResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, err := d.known(r.Name)
	if err != nil {
		return nil, err
	}
	return &volume.PathResponse{Mountpoint: p}, nil
}

// Mount records a mount by ID and returns the volume's directory.
func (d *Driver) Mount(r *volume.MountRequest) (*volume.MountResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, err := d.known(r.Name)
	if err != nil {
		return nil, err
	}
	if d.mounts[r.Name] == nil {
		d.mounts[r.Name] = map[string]bool{}
	}
	d.mounts[r.Name][r.ID] = true
	d.log.Info("volume mounted", "volume", r.Name, "id", r.ID)
	return &volume.MountResponse{Mountpoint: p}, nil
}

// Unmount forgets a mount by ID.
func (d *Driver) Unmount(r *volume.UnmountRequest) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.known(r.Name); err != nil {
		return err
	}
	if !d.mounts[r.Name][r.ID] {
		return fmt.Errorf("localvolume: volume %q is not mounted by %q", r.Name, r.ID)
	}
	delete(d.mounts[r.Name], r.ID)
	d.log.Info("volume unmounted", "volume", r.Name, "id", r.ID)
	return nil
}

// Capabilities says the volumes are local to this host.
func (d *Driver) Capabilities() *volume.CapabilitiesResponse {
	return &volume.CapabilitiesResponse{Capabilities: volume.Capability{Scope: "local"}}
}

// Serve serves the driver on a unix socket at socket (removing a stale
// file first) until ctx ends, then removes the socket.
func Serve(ctx context.Context, d *Driver, socket string) error {
	if err := names.CheckSocketPath("socket path", socket); err != nil {
		return fmt.Errorf("localvolume: %w", err)
	}
	if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("localvolume: stale socket: %w", err)
	}
	l, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("localvolume: %w", err)
	}
	served := make(chan error, 1)
	go func() { served <- volume.NewHandler(d).Serve(l) }()
	d.log.Info("docker volume plugin serving", "socket", socket, "root", d.root, "pid", os.Getpid())
	select {
	case <-ctx.Done():
		_ = l.Close()
		<-served
		return nil
	case err := <-served:
		return fmt.Errorf("localvolume: serve: %w", err)
	}
}

// Command returns the docker-volume-plugin command: -socket PATH -root
// DIR; it serves until its context is done.
func Command() *cobra.Command {
	var socket, root string
	cmd := &cobra.Command{
		Use:   "docker-volume-plugin -socket PATH -root DIR",
		Short: "serve the reference Docker volume plugin",
		Long: `Serves plugvisor's reference Docker volume plugin (VolumeDriver) on a unix
socket until SIGTERM or SIGINT. A volume is a directory <root>/<name>; its
mounts are counted by mount ID. For a plugvisor agent, serve it in
<data-dir>/plugins: discovery registers it under the socket's file name,
which "plugvisor docker volume create -driver" names.`,
		Example: `  plugvisor docker-volume-plugin -socket /var/lib/plugvisor/plugins/local.sock -root /var/lib/local-volumes
  plugvisor docker volume create -driver local db`,
		Args: cli.Args("", "plugvisor docker-volume-plugin -socket /run/docker/plugins/local.sock -root /var/lib/local-volumes"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := New(root, hclog.New(&hclog.LoggerOptions{Name: "docker-volume-plugin", Level: hclog.Info, Output: cmd.ErrOrStderr()}))
			if err != nil {
				return err
			}
			return Serve(cmd.Context(), d, socket)
		},
	}
	cmd.Flags().StringVar(&socket, "socket", "", "unix socket to serve on (absolute, at most 107 bytes)")
	cmd.Flags().StringVar(&root, "root", "", "directory that holds the volumes (absolute)")
	cli.Require(cmd, "socket", "root")
	return cmd
}

// Run runs the plugin command on args until ctx ends, printing help and
// logs to stderr.
func Run(ctx context.Context, args []string, stderr io.Writer) error {
	return cli.Run(ctx, Command(), args, stderr, stderr)
}
