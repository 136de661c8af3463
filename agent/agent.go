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

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/actors"
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

// ErrAlreadyRunning: another agent holds the data dir.
var ErrAlreadyRunning = errclass.New(errclass.Conflict, "another plugvisor agent is using this data dir")

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
	// starting is the restored CSI plugins health waits for (starting.go).
	starting starting
	// listeners are bound at start, before any actor, and served once
	// every part runs; Shutdown closes those not served yet.
	listeners []served
	servers   []*http.Server
	tcp       tcpListener        // the TCP listener's bound address and tokens
	cancel    context.CancelFunc // ends long-lived API requests (event streams), with api.ErrStopping as the cause
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
	a.starting.restore(a.registry.ListPlugins)
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
	if err := makeDataDir(a.cfg.DataDir); err != nil {
		return err
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
