// Package agent wires plugvisor's parts into one node agent: the durable
// store, the registry, the plugin-type managers, discovery, and the local
// HTTP API on a unix socket. It holds no logic of its own beyond start and
// shutdown order.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/discovery"
	"github.com/plugvisor/plugvisor/dockervolume"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
)

// DataDirEnv names the environment variable that sets the default data dir.
const DataDirEnv = "PLUGVISOR_DATA_DIR"

// DefaultDataDir is $PLUGVISOR_DATA_DIR, or ./.plugvisor.
func DefaultDataDir() string {
	if d := os.Getenv(DataDirEnv); d != "" {
		return d
	}
	return ".plugvisor"
}

// SocketPath is where the agent of dataDir serves its API.
func SocketPath(dataDir string) string { return filepath.Join(dataDir, "plugvisor.sock") }

// Config configures an agent. The zero value plus a DataDir works.
type Config struct {
	// DataDir holds the state file, the API socket and the watched plugin
	// directories (default DefaultDataDir()).
	DataDir string
	// SocketDirs and SpecDirs are watched for plugins besides
	// <data>/plugins and <data>/specs.
	SocketDirs, SpecDirs []string
	// HTTPAddr, when set (e.g. 127.0.0.1:8080), also serves the API on TCP.
	HTTPAddr string
	// ResyncInterval and FingerprintInterval tune the plugin managers
	// (defaults 30s each).
	ResyncInterval, FingerprintInterval time.Duration
	// NodeID names this node in the CSI catalog (default: the host name).
	NodeID string
	// ResetCorruptState moves a corrupt state file aside and starts empty
	// instead of refusing to start.
	ResetCorruptState bool
	// LockTimeout bounds the wait for another agent's lock on the state
	// file (default 1s).
	LockTimeout time.Duration
	// Logger receives the agent's logs (default: discard).
	Logger hclog.Logger
}

func (c Config) withDefaults() Config {
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir()
	}
	if abs, err := filepath.Abs(c.DataDir); err == nil {
		c.DataDir = abs
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.ResyncInterval <= 0 {
		c.ResyncInterval = 30 * time.Second
	}
	if c.FingerprintInterval <= 0 {
		c.FingerprintInterval = 30 * time.Second
	}
	if c.LockTimeout <= 0 {
		c.LockTimeout = time.Second
	}
	if c.NodeID == "" {
		c.NodeID, _ = os.Hostname()
	}
	return c
}

// ErrAlreadyRunning: another agent holds the data dir.
var ErrAlreadyRunning = errors.New("agent: another plugvisor agent is using this data dir")

// Agent is a running plugvisor agent.
type Agent struct {
	cfg      Config
	log      hclog.Logger
	store    *storage.Bolt
	system   *actor.ActorSystem
	registry *registry.Registry
	docker   *dockervolume.Manager
	csi      *csi.Manager
	catalog  *csi.Catalog
	volumes  *volumes.Manager
	disc     *discovery.Discovery
	metrics  *metrics
	servers  []*http.Server
	cancel   context.CancelFunc // ends long-lived API requests (event streams)
	stops    []func(context.Context) error
}

// Start opens the data dir and starts every part. On error, whatever had
// started is stopped again.
func Start(cfg Config) (_ *Agent, err error) {
	cfg = cfg.withDefaults()
	a := &Agent{cfg: cfg, log: cfg.Logger, metrics: newMetrics()}
	defer func() {
		if err != nil {
			_ = a.Shutdown(context.Background())
		}
	}()
	if err := a.openStore(); err != nil {
		return nil, err
	}
	a.system = actors.NewSystem(cfg.Logger)
	if err := a.startRegistry(); err != nil {
		return nil, err
	}
	if err := a.startManagers(); err != nil {
		return nil, err
	}
	if err := a.startDiscovery(); err != nil {
		return nil, err
	}
	if err := a.serveAPI(); err != nil {
		return nil, err
	}
	a.log.Info("agent started", "data_dir", cfg.DataDir, "api", a.SocketPath(), "http", cfg.HTTPAddr,
		"plugins", len(a.registry.ListPlugins("")))
	return a, nil
}

func (a *Agent) openStore() error {
	if err := os.MkdirAll(a.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("agent: data dir: %w", err)
	}
	for _, dir := range []string{a.PluginDir(), a.SpecDir()} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("agent: plugin dir: %w", err)
		}
	}
	path := filepath.Join(a.cfg.DataDir, "state.db")
	store, err := storage.OpenBolt(path, storage.BoltOptions{
		LockTimeout:      a.cfg.LockTimeout,
		MoveAsideCorrupt: a.cfg.ResetCorruptState,
		Logger:           slog.New(actors.NewSlogHandler(a.log.Named("storage"))),
	})
	if errors.Is(err, storage.ErrLocked) {
		return fmt.Errorf("%w: %s (%v)", ErrAlreadyRunning, a.cfg.DataDir, err)
	}
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	a.store = store
	a.stops = append(a.stops, func(context.Context) error { return store.Close() })
	return nil
}

func (a *Agent) startRegistry() error {
	bucket, err := a.store.Bucket(registry.BucketName)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	a.registry, err = registry.New(a.system, registry.Config{
		Bucket:  bucket,
		Logger:  a.log,
		Metrics: registryMetrics{a.metrics},
	})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	a.stops = append(a.stops, func(context.Context) error { return a.registry.Shutdown() })
	return nil
}

// startManagers starts the plugin-type managers (one supervised instance
// actor per plugin, fed by the registry), the CSI catalog fed by the CSI
// manager's fingerprints, and the volume manager that claims through the
// catalog. Their stops run in reverse: volumes, then the CSI manager (whose
// final fingerprints reach the catalog), then the catalog, then Docker's.
func (a *Agent) startManagers() error {
	docker, err := dockervolume.StartManager(a.system, dockervolume.ManagerConfig{
		Registry:       a.registry,
		Logger:         a.log,
		ResyncInterval: a.cfg.ResyncInterval,
		HealthInterval: a.cfg.FingerprintInterval,
	})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	a.docker = docker
	a.stops = append(a.stops, func(context.Context) error { return docker.Shutdown() })

	a.csi, err = csi.StartManager(a.system, csi.ManagerConfig{
		Registry:       a.registry,
		Logger:         a.log,
		ResyncInterval: a.cfg.ResyncInterval,
		Fingerprint:    csi.FingerprintOptions{Interval: a.cfg.FingerprintInterval, Observe: a.metrics.observeFingerprint},
		Metrics:        csiMetrics{a.metrics},
	})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	bucket, err := a.store.Bucket(csi.CatalogBucket)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	a.catalog, err = csi.StartCatalog(a.system, csi.CatalogConfig{
		Bucket: bucket, NodeID: a.cfg.NodeID, Manager: a.csi.PID(), Logger: a.log,
	})
	if err != nil {
		_ = a.csi.Shutdown(context.Background())
		return fmt.Errorf("agent: %w", err)
	}
	a.stops = append(a.stops, a.catalog.Shutdown, a.csi.Shutdown)

	records, err := a.store.Bucket(volumes.Bucket)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	a.volumes, err = volumes.Start(a.system, volumes.Config{
		Bucket:   records,
		Catalog:  volumeCatalog{system: a.system, catalog: a.catalog},
		Registry: a.registry,
		Root:     filepath.Join(a.cfg.DataDir, "csi"),
		Logger:   a.log,
	})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	a.stops = append(a.stops, a.volumes.Shutdown)
	return nil
}

// startDiscovery watches the plugin directories and registers what it finds.
func (a *Agent) startDiscovery() error {
	disc, err := discovery.Start(a.system, discovery.Config{
		Dirs: discovery.Dirs{
			Sockets: append([]string{a.PluginDir()}, a.cfg.SocketDirs...),
			Specs:   append([]string{a.SpecDir()}, a.cfg.SpecDirs...),
		},
		Registry: a.registry,
		Logger:   a.log,
	})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	a.disc = disc
	a.stops = append(a.stops, func(context.Context) error { return disc.Shutdown() })
	return nil
}

func (a *Agent) serveAPI() error {
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	handler := (&api.Server{
		Registry: a.registry,
		CSI:      a.csi,
		Catalog:  a.catalog,
		Volumes:  a.volumes,
		OnMount:  a.metrics.observeMount,
		Health:   a.health,
		Metrics:  promhttp.HandlerFor(a.metrics.reg, promhttp.HandlerOpts{}),
		Logger:   a.log.Named("api"),
	}).Handler()

	socket := a.SocketPath()
	if err := registry.ValidateSocketPath(socket); err != nil {
		return fmt.Errorf("agent: API socket: %w; use a shorter data dir", err)
	}
	// The state file's lock proves no other agent owns this dir: a socket
	// file left here is stale.
	_ = os.Remove(socket)
	unixListener, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("agent: API socket: %w", err)
	}
	if err := os.Chmod(socket, 0o600); err != nil {
		_ = unixListener.Close()
		return fmt.Errorf("agent: API socket: %w", err)
	}
	listeners := []net.Listener{unixListener}
	if a.cfg.HTTPAddr != "" {
		tcp, err := net.Listen("tcp", a.cfg.HTTPAddr)
		if err != nil {
			_ = unixListener.Close()
			return fmt.Errorf("agent: -http %s: %w", a.cfg.HTTPAddr, err)
		}
		listeners = append(listeners, tcp)
	}
	for _, l := range listeners {
		srv := &http.Server{
			Handler:           handler,
			ReadHeaderTimeout: 10 * time.Second,
			BaseContext:       func(net.Listener) context.Context { return ctx },
		}
		a.servers = append(a.servers, srv)
		go func() {
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				a.log.Error("API server stopped", "listener", l.Addr().String(), "error", err)
			}
		}()
	}
	return nil
}

// health summarises the agent for GET /v1/health.
func (a *Agent) health() map[string]string {
	healthy, total := 0, 0
	for _, fp := range a.csi.Plugins() {
		total++
		if fp.GetHealthy() {
			healthy++
		}
	}
	return map[string]string{
		"data_dir":              a.cfg.DataDir,
		"plugins":               strconv.Itoa(len(a.registry.ListPlugins(""))),
		"csi_instances_healthy": fmt.Sprintf("%d/%d", healthy, total),
		"discovered":            strconv.Itoa(len(a.disc.Plugins())),
	}
}

// DataDir is the agent's data dir.
func (a *Agent) DataDir() string { return a.cfg.DataDir }

// SocketPath is the unix socket the API listens on.
func (a *Agent) SocketPath() string { return SocketPath(a.cfg.DataDir) }

// PluginDir is the watched directory for plugin sockets.
func (a *Agent) PluginDir() string { return filepath.Join(a.cfg.DataDir, "plugins") }

// SpecDir is the watched directory for plugin spec files.
func (a *Agent) SpecDir() string { return filepath.Join(a.cfg.DataDir, "specs") }

// Registry is the agent's plugin registry.
func (a *Agent) Registry() *registry.Registry { return a.registry }

// System is the agent's actor system, for actors that talk to its parts.
func (a *Agent) System() *actor.ActorSystem { return a.system }

// CSI is the agent's CSI manager.
func (a *Agent) CSI() *csi.Manager { return a.csi }

// Catalog is the agent's CSI catalog.
func (a *Agent) Catalog() *csi.Catalog { return a.catalog }

// Volumes is the agent's volume manager.
func (a *Agent) Volumes() *volumes.Manager { return a.volumes }

// Discovery is the agent's plugin discovery.
func (a *Agent) Discovery() *discovery.Discovery { return a.disc }

// DockerVolumes is the agent's Docker volume-driver manager.
func (a *Agent) DockerVolumes() *dockervolume.Manager { return a.docker }

// Shutdown stops the API, then the managers (so final fingerprints mark
// plugins unhealthy), then the registry, then closes the store. It returns
// every error it met.
func (a *Agent) Shutdown(ctx context.Context) error {
	var errs []error
	if a.cancel != nil {
		a.cancel()
	}
	for _, srv := range a.servers {
		if err := srv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("agent: API server: %w", err))
		}
	}
	a.servers = nil
	for i := len(a.stops) - 1; i >= 0; i-- {
		if err := a.stops[i](ctx); err != nil {
			errs = append(errs, err)
		}
	}
	a.stops = nil
	if a.system != nil {
		a.system.Shutdown()
		a.system = nil
	}
	if err := errors.Join(errs...); err != nil {
		a.log.Error("agent stopped with errors", "error", err)
		return err
	}
	a.log.Info("agent stopped")
	return nil
}
