// Package agent wires plugvisor's parts into one node agent: the durable
// store, the registry, the plugin-type managers, discovery, and the local
// HTTP API on a unix socket. It holds no logic of its own beyond start and
// shutdown order.
//
// An embedder that wants the whole agent in its own process calls Start
// with a Config (a data dir is enough), uses the parts through the
// accessors (Registry, CSI, Catalog, Volumes, Discovery, DockerVolumes),
// and calls Shutdown, which stops them in order and closes the state file.
// Its own plugin types join through Config.PluginTypes (docs/plugin-types.md).
// A program that wants only some of the parts starts those itself, as
// Start does.
package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/csi/catalog"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/controller"
	"github.com/plugvisor/plugvisor/csi/manager"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/discovery"
	"github.com/plugvisor/plugvisor/dockervolume"
	dockervolumes "github.com/plugvisor/plugvisor/dockervolume/volumes"
	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/fleet/member"
	"github.com/plugvisor/plugvisor/internal/startlog"
	"github.com/plugvisor/plugvisor/kubeletreg"
	"github.com/plugvisor/plugvisor/messages"
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
	// RegistrationDirs are watched for kubelet's registration sockets
	// (node-driver-registrar's; kubelet's own directory is
	// kubeletreg.KubeletDir); none by default.
	RegistrationDirs []string
	// DockerDirs also watches Docker's own plugin directories
	// (discovery.DockerDirs), so the agent runs beside dockerd as a drop-in.
	DockerDirs bool
	// HTTPAddr, when set (e.g. 127.0.0.1:4646), also serves the API on
	// TCP. Beyond loopback it needs TLS; on loopback, TLS or TokenFile;
	// else the agent refuses to start (ErrUnprotectedHTTP) unless
	// HTTPInsecure is set.
	HTTPAddr string
	// HTTPHosts are further host names (no port) by which clients reach
	// HTTPAddr: the Host header of a request must name the listener.
	HTTPHosts []string
	// TLSCert and TLSKey are the TCP listener's certificate and key (PEM
	// files); clients must present a certificate signed by TLSCA.
	TLSCert, TLSKey, TLSCA string
	// TokenFile lists the ACL tokens the TCP listener requires (see
	// api.ParseTokens). The unix socket trusts its file mode instead.
	TokenFile string
	// HTTPInsecure serves HTTPAddr even without the protection its address
	// needs, with a warning at every start.
	HTTPInsecure bool
	// HTTPLimits bound the API server's timeouts, header size and
	// connections.
	HTTPLimits HTTPLimits
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
	// VolumeOperationTimeout bounds a whole volume operation (mount,
	// unmount, claim, release, detach, create, delete, expand, snapshots)
	// and how long its caller waits; zero means the default (2 minutes),
	// negative is refused.
	VolumeOperationTimeout time.Duration
	// VolumeStatsInterval is how often each published volume's node plugin
	// is asked NodeGetVolumeStats, when it advertises GET_VOLUME_STATS:
	// the plugvisor_volume_stats_* series and the volume's condition
	// events follow it. Zero asks never; negative is refused.
	VolumeStatsInterval time.Duration
	// MaxPluginsPerType bounds the allocations of one plugin type
	// (default registry.DefaultPluginsPerType).
	MaxPluginsPerType int
	// MaxPluginOptionsBytes bounds one plugin's options, keys and values
	// together (default registry.DefaultOptionsBytes).
	MaxPluginOptionsBytes int
	// MaxSubscribers bounds the open event subscriptions, every API event
	// stream among them (default registry.DefaultSubscribers).
	MaxSubscribers int
	// BodyLimits bound the counts in one API request body: secrets,
	// parameters, topology segments, mount flags (api.Limits; zero fields
	// take their defaults, negative ones are refused).
	BodyLimits api.Limits
	// MaxVolumes bounds the volumes of the CSI catalog (default
	// model.DefaultMaxVolumes).
	MaxVolumes int
	// Logger receives the agent's logs (default: discard).
	Logger hclog.Logger
	// Cluster, when set, runs the agent in cluster mode (see
	// ClusterConfig); nil keeps the catalog on this node.
	Cluster *ClusterConfig
	// PluginTypes are the embedder's own plugin types (see PluginType),
	// started in order after the agent's own managers and stopped before
	// them, in reverse.
	PluginTypes []PluginType
}

// validate checks the raw config: a negative duration is an error, not a
// default.
func (c Config) validate() error {
	problems := []error{c.validateHTTP(), validatePluginTypes(c.PluginTypes)}
	if err := c.BodyLimits.Validate(); err != nil {
		problems = append(problems, fmt.Errorf("%w: %w", ErrInvalidConfig, err))
	}
	for _, d := range []struct {
		name  string
		value time.Duration
	}{{"ResyncInterval", c.ResyncInterval}, {"FingerprintInterval", c.FingerprintInterval}, {"LockTimeout", c.LockTimeout}} {
		if d.value < 0 {
			problems = append(problems, fmt.Errorf("%w: %s is %v; give a positive duration, or 0 for the default", ErrInvalidConfig, d.name, d.value))
		}
	}
	for _, dir := range c.RegistrationDirs {
		if !filepath.IsAbs(dir) {
			problems = append(problems, fmt.Errorf("%w: registration dir %q is not absolute; give the full path from /, e.g. %s",
				ErrInvalidConfig, dir, kubeletreg.KubeletDir))
		}
	}
	return errors.Join(problems...)
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
	c.HTTPLimits = c.HTTPLimits.withDefaults()
	return c
}

// ErrAlreadyRunning: another agent holds the data dir.
var ErrAlreadyRunning = errclass.New(errclass.Conflict, "another plugvisor agent is using this data dir")

// ErrInvalidConfig: a setting is out of range or missing its partner.
var ErrInvalidConfig = errclass.New(errclass.Invalid, "invalid config")

// Agent is a running plugvisor agent.
type Agent struct {
	cfg      Config
	log      hclog.Logger
	store    *storage.Bolt
	system   *actor.ActorSystem
	registry *registry.Registry
	docker   *dockervolume.Manager
	// dockerVolumes is the Docker volume service.
	dockerVolumes *dockervolumes.Service
	csi           *manager.Manager
	catalog       *catalog.Catalog
	volumes       *volumes.Manager
	ctl           *controller.Controller
	member        *member.Member // cluster mode only
	disc          *discovery.Discovery
	kubelet       *kubeletreg.Watcher // nil without RegistrationDirs
	metrics       *metrics
	// storeHealth hears of the registry's durable writes, for health.
	storeHealth storeHealth
	// listeners are bound at start, before any actor, and served once
	// every part runs; Shutdown closes those not served yet.
	listeners []served
	servers   []*http.Server
	tcp       tcpListener        // the TCP listener's bound address and tokens
	cancel    context.CancelFunc // ends long-lived API requests (event streams)
	stops     []func(context.Context) error
}

// Start opens the data dir and starts every part. On error, whatever had
// started is stopped again.
//
// A state file that opens but holds a record its owner cannot use (it fails
// its checksum, does not decode, or fails validation) is corruption like a
// file that does not open: with ResetCorruptState it is moved aside, with a
// warning, and the agent starts once more with an empty store.
func Start(cfg Config) (*Agent, error) {
	a, err := start(cfg)
	if err == nil || !cfg.ResetCorruptState || !isCorrupt(err) {
		return a, err
	}
	cfg = cfg.withDefaults()
	movedTo, moveErr := storage.MoveAside(statePath(cfg.DataDir))
	if moveErr != nil {
		return nil, fmt.Errorf("%w; moving it aside failed: %w", err, moveErr)
	}
	cfg.Logger.Warn("agent: state file held a corrupt record; moved it aside and started with an empty store",
		"moved_to", movedTo, "error", err)
	return start(cfg)
}

// isCorrupt reports a start that failed on a record of the state file.
func isCorrupt(err error) bool {
	return errors.Is(err, storage.ErrCorrupt) || errors.Is(err, model.ErrCorrupt)
}

// statePath is the state file of the agent of dataDir.
func statePath(dataDir string) string { return filepath.Join(dataDir, "state.db") }

// start opens the store and binds the API's listeners before it starts any
// actor, so that the usual failures (another agent on the data dir, a port
// in use, a bad token file or certificate) start nothing. Its parts log
// through a startlog.Logger: a failed start says why in its error alone.
func start(cfg Config) (_ *Agent, err error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	log := startlog.New(cfg.Logger)
	cfg.Logger = log
	a := &Agent{cfg: cfg, log: log, metrics: newMetrics()}
	defer func() {
		if err != nil {
			_ = a.Shutdown(context.Background())
			log.Failed()
		}
	}()
	if err := a.openStore(); err != nil {
		return nil, err
	}
	if a.listeners, err = a.listen(); err != nil {
		return nil, err
	}
	if err := a.startCluster(); err != nil {
		return nil, err
	}
	a.system = actors.NewSystem(cfg.Logger)
	if err := a.startRegistry(); err != nil {
		return nil, err
	}
	if err := a.startManagers(); err != nil {
		return nil, err
	}
	if err := a.startPluginTypes(); err != nil {
		return nil, err
	}
	if err := a.startDiscovery(); err != nil {
		return nil, err
	}
	if err := a.startKubeletRegistration(); err != nil {
		return nil, err
	}
	if err := a.startDockerVolumes(); err != nil {
		return nil, err
	}
	// Nothing fails from here on. The start-up is in the log before the
	// API answers its first request.
	log.Succeeded()
	a.log.Info("agent started", "data_dir", cfg.DataDir, "api", a.SocketPath(), "http", a.tcp.addr,
		"plugins", len(a.registry.ListPlugins("")))
	a.serveAPI()
	return a, nil
}

func (a *Agent) openStore() error {
	if err := os.MkdirAll(a.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	for _, dir := range []string{a.PluginDir(), a.SpecDir()} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("plugin dir: %w", err)
		}
	}
	path := statePath(a.cfg.DataDir)
	store, err := storage.OpenBolt(path, storage.BoltOptions{
		LockTimeout:      a.cfg.LockTimeout,
		MoveAsideCorrupt: a.cfg.ResetCorruptState,
		Logger:           a.log.Named("storage"),
	})
	if errors.Is(err, storage.ErrLocked) {
		return fmt.Errorf("%w: %s (%w)", ErrAlreadyRunning, a.cfg.DataDir, err)
	}
	if err != nil {
		return err
	}
	a.store = store
	a.stops = append(a.stops, func(context.Context) error { return store.Close() })
	return nil
}

func (a *Agent) startRegistry() error {
	bucket, err := a.store.Bucket(registry.BucketName)
	if err != nil {
		return err
	}
	a.registry, err = registry.New(a.system, registry.Config{
		Bucket:  bucket,
		Logger:  a.log,
		Metrics: registryMetrics{m: a.metrics, store: &a.storeHealth},
		Limits: registry.Limits{PluginsPerType: a.cfg.MaxPluginsPerType, OptionsBytes: a.cfg.MaxPluginOptionsBytes,
			Subscribers: a.cfg.MaxSubscribers},
	})
	if err != nil {
		return err
	}
	a.stops = append(a.stops, func(context.Context) error { return a.registry.Shutdown() })
	return nil
}

// startManagers starts the plugin-type managers (one supervised instance
// actor per plugin, fed by the registry), the CSI catalog fed by the CSI
// manager's fingerprints, and the volume manager that claims through the
// catalog. Their stops run in reverse: volumes, then the CSI manager's
// instances (whose final fingerprints reach the catalog), then the catalog,
// then the CSI manager actor it subscribed to, then Docker's.
func (a *Agent) startManagers() error {
	docker, err := dockervolume.Start(a.system, dockervolume.Config{
		Registry:       a.registry,
		Logger:         a.log,
		ResyncInterval: a.cfg.ResyncInterval,
		HealthInterval: a.cfg.FingerprintInterval,
		Metrics:        csiMetrics{a.metrics},
	})
	if err != nil {
		return err
	}
	a.docker = docker
	a.stops = append(a.stops, func(context.Context) error { return docker.Shutdown() })

	a.csi, err = manager.Start(a.system, manager.Config{
		Registry:       a.registry,
		Logger:         a.log,
		ResyncInterval: a.cfg.ResyncInterval,
		Fingerprint:    manager.FingerprintOptions{Interval: a.cfg.FingerprintInterval, Observe: a.metrics.observeFingerprint},
		Metrics:        csiMetrics{a.metrics},
	})
	if err != nil {
		return err
	}
	bucket, err := a.store.Bucket(catalog.Bucket)
	if err != nil {
		return err
	}
	a.catalog, err = catalog.Start(a.system, catalog.Config{
		Bucket: bucket, NodeID: a.cfg.NodeID, Manager: a.csi.PID(), Logger: a.log, MaxVolumes: a.cfg.MaxVolumes,
		Fleet: a.fleet(),
	})
	if err != nil {
		_ = a.csi.Shutdown(context.Background())
		return err
	}
	a.stops = append(a.stops, a.csi.Shutdown, a.catalog.Shutdown, a.csi.StopInstances)

	records, err := a.store.Bucket(volumes.Bucket)
	if err != nil {
		return err
	}
	claims := a.followClaims()
	a.volumes, err = volumes.Start(a.system, volumes.Config{
		Bucket:      records,
		Catalog:     a.catalog,
		Attachments: a.fleet(),
		Registry:    a.registry,
		Root:        filepath.Join(a.cfg.DataDir, "csi"),
		Logger:      a.log,
		NodeID:      a.cfg.NodeID,
		OnEvent:     a.onEvent,

		OperationTimeout: a.cfg.VolumeOperationTimeout,
		StatsInterval:    a.cfg.VolumeStatsInterval, StatsSupported: a.nodeSupportsStats,
	})
	if err != nil {
		return err
	}
	a.metrics.reg.MustRegister(newVolumeStatsCollector(a.volumes.VolumeStats))
	a.stops = append(a.stops, a.volumes.Shutdown)
	claims.deliverTo(a.volumes)
	a.followStanding()
	if err := a.startGC(); err != nil {
		return err
	}
	if err := a.startCompactor(); err != nil {
		return err
	}

	a.ctl, err = controller.New(controller.Config{
		Catalog: a.catalog, Plugins: a.registry, NodeExpander: a.volumes,
		OperationTimeout: a.cfg.VolumeOperationTimeout, Logger: a.log,
	})
	if err != nil {
		return err
	}
	return nil
}

// startDockerVolumes starts the Docker volume service on the store, finding
// drivers through discovery (Docker's Get semantics).
func (a *Agent) startDockerVolumes() error {
	bucket, err := a.store.Bucket(dockervolumes.Bucket)
	if err != nil {
		return err
	}
	a.dockerVolumes, err = dockervolumes.Start(a.system, dockervolumes.Config{
		Bucket:  bucket,
		Drivers: dockervolumes.RegistryDrivers{Registry: a.registry, Discovery: a.disc},
		Logger:  a.log,
	})
	if err != nil {
		return err
	}
	a.stops = append(a.stops, func(context.Context) error { return a.dockerVolumes.Shutdown() })
	return nil
}

// startDiscovery watches the plugin directories and registers what it finds.
func (a *Agent) startDiscovery() error {
	dirs := discovery.Dirs{
		Sockets: append([]string{a.PluginDir()}, a.cfg.SocketDirs...),
		Specs:   append([]string{a.SpecDir()}, a.cfg.SpecDirs...),
	}
	if a.cfg.DockerDirs {
		docker := discovery.DockerDirs()
		dirs.Sockets, dirs.Specs = append(dirs.Sockets, docker.Sockets...), append(dirs.Specs, docker.Specs...)
	}
	disc, err := discovery.Start(a.system, discovery.Config{
		Dirs:     dirs,
		Registry: a.registry,
		Logger:   a.log,
		Metrics:  a.metrics,
	})
	if err != nil {
		return err
	}
	a.disc = disc
	a.metrics.reg.MustRegister(newDiscoveredCollector(a.Plugins))
	a.stops = append(a.stops, func(context.Context) error { return disc.Shutdown() })
	return nil
}

// Plugins returns what discovery and the kubelet registration watcher
// know of every plugin found on disk, each with its health as its manager
// last saw it (the docker-volume manager's checks, the CSI manager's
// fingerprints, the embedder's types' Instances).
func (a *Agent) Plugins() []*messages.DiscoveredPlugin {
	type health struct {
		healthy bool
		err     string
	}
	checked := map[[2]string]health{}
	for _, h := range a.docker.Plugins() {
		checked[[2]string{dockervolume.PluginType, h.GetName()}] = health{h.GetHealthy(), h.GetDescription()}
	}
	for _, fp := range a.csi.Plugins() {
		checked[[2]string{fp.GetType(), fp.GetName()}] = health{fp.GetHealthy(), fp.GetHealthDescription()}
	}
	for _, t := range a.cfg.PluginTypes {
		for _, h := range t.Manager.Instances() {
			checked[[2]string{t.Name, h.Name}] = health{h.Healthy, h.Description}
		}
	}
	found := a.found()
	out := make([]*messages.DiscoveredPlugin, 0, len(found))
	for _, p := range found {
		p = proto.CloneOf(p)
		for _, r := range p.GetRegistered() {
			h, ok := checked[[2]string{r.GetType(), r.GetName()}]
			switch {
			case !ok:
			case !h.healthy:
				p.Health, p.HealthError = "unhealthy", h.err
			case p.Health == "":
				p.Health = "healthy"
			}
		}
		out = append(out, p)
	}
	return out
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
func (a *Agent) CSI() *manager.Manager { return a.csi }

// Catalog is the agent's CSI catalog.
func (a *Agent) Catalog() *catalog.Catalog { return a.catalog }

// Volumes is the agent's volume manager.
func (a *Agent) Volumes() *volumes.Manager { return a.volumes }

// Controller runs the agent's controller operations (create, delete,
// expand, snapshots).
func (a *Agent) Controller() *controller.Controller { return a.ctl }

// Discovery is the agent's plugin discovery.
func (a *Agent) Discovery() *discovery.Discovery { return a.disc }

// DockerVolumes is the agent's Docker volume-driver manager.
func (a *Agent) DockerVolumes() *dockervolume.Manager { return a.docker }

// DockerVolumeService is the agent's Docker volume service.
func (a *Agent) DockerVolumeService() *dockervolumes.Service { return a.dockerVolumes }

// Shutdown stops the API, then the managers (so final fingerprints mark
// plugins unhealthy), then the registry, then closes the store. It returns
// every error it met.
func (a *Agent) Shutdown(ctx context.Context) error {
	var errs []error
	if a.cancel != nil {
		a.cancel()
	}
	if s := a.fleetStore(); s != nil {
		s.Hurry()
	}
	for _, s := range a.listeners {
		_ = s.listener.Close()
	}
	a.listeners = nil
	for _, srv := range a.servers {
		if err := srv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("API server: %w", err))
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
