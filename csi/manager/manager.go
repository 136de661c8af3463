package manager

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/actors/plugintype"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/supervisor"
)

// Default values of [Config].
const (
	DefaultResyncInterval  = plugintype.DefaultResyncInterval
	DefaultShutdownTimeout = 10 * time.Second
	DefaultName            = "csi-manager"
)

// Metrics counts what the manager's supervision decides; plugintype
// counts it, for every plugin type alike.
type Metrics interface {
	plugintype.Metrics
}

// Config configures the CSI manager. Only Registry is required.
type Config struct {
	// Registry is where the manager learns which plugins run.
	Registry *registry.Registry
	// Logger receives the manager's and its instances' log lines; nil
	// discards them.
	Logger hclog.Logger
	// Supervision is the restart policy of the plugin instances. Its
	// OnGiveUp must be Stop (the default): an instance that gives up is
	// reported as failed and left stopped until the registry says
	// something new about its plugin.
	Supervision supervisor.Spec
	// ResyncInterval is the time between comparisons of the running
	// instances with a registry snapshot (default DefaultResyncInterval).
	// Send the manager a *plugintype.Resync for one now.
	ResyncInterval time.Duration
	// ShutdownTimeout bounds how long Shutdown waits for the instances to
	// stop (default DefaultShutdownTimeout, or less when Shutdown's context
	// ends sooner).
	ShutdownTimeout time.Duration
	// Fingerprint says how each instance fingerprints its plugin.
	Fingerprint FingerprintOptions
	// Metrics, when set, hears of every restart an instance's supervisor
	// schedules and of every instance that gives up. It is called on the
	// manager's goroutine and must not block.
	Metrics Metrics
	// Clock sets the instances' timers, the shutdown timer and the
	// supervisor's backoff (default: the real clock). The resync timer
	// always runs on the real clock.
	Clock supervisor.Clock
	// Name is the manager actor's name (default DefaultName).
	Name string
}

func (c Config) validate() error {
	var problems []error
	if c.Registry == nil {
		problems = append(problems, fmt.Errorf("%w: the CSI manager needs a registry", csi.ErrInvalidOptions))
	}
	if c.ResyncInterval < 0 || c.ShutdownTimeout < 0 {
		problems = append(problems, fmt.Errorf("%w: resync interval %v and shutdown timeout %v must not be negative",
			csi.ErrInvalidOptions, c.ResyncInterval, c.ShutdownTimeout))
	}
	if err := c.Supervision.StopsOnGiveUp("Supervision"); err != nil {
		problems = append(problems, fmt.Errorf("%w: %w: the manager reports a plugin that gave up", csi.ErrInvalidOptions, err))
	}
	if err := c.Supervision.Validate(); err != nil {
		problems = append(problems, fmt.Errorf("%w: supervision: %w", csi.ErrInvalidOptions, err))
	}
	return errors.Join(append(problems, c.Fingerprint.validate())...)
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	c.Logger = c.Logger.Named("csi-manager")
	if c.ResyncInterval == 0 {
		c.ResyncInterval = DefaultResyncInterval
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if c.Name == "" {
		c.Name = DefaultName
	}
	c.Fingerprint = c.Fingerprint.withDefaults()
	return c
}

// Manager is the Go facade over the CSI manager actor. Actors talk to the
// manager directly at PID: SubscribeCSI, ListCSIPluginsRequest,
// ShutdownCSIManager, and *plugintype.Resync for a resync now.
type Manager struct {
	system    *actor.ActorSystem
	pid       *actor.PID
	published *atomic.Pointer[fingerprints]
	timeout   time.Duration
	log       hclog.Logger
	drain     sync.Once
	drainErr  error
	shutdown  sync.Once
	err       error
}

// Start starts the CSI manager actor in system. The manager
// subscribes to the registry's csi-controller and csi-node plugins, with a
// replay of the current ones, and runs one supervised plugin instance actor
// per (type, name), serving the plugin's current allocation (the
// bookkeeping is plugintype.Instances').
func Start(system *actor.ActorSystem, cfg Config) (*Manager, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	strategy, err := supervisor.NewStrategy(cfg.Supervision, supervisor.WithClock(cfg.Clock))
	if err != nil {
		return nil, err
	}
	published := &atomic.Pointer[fingerprints]{}
	published.Store(newFingerprints())
	subscribers := plugintype.NewSubscribers()
	props := actor.PropsFromProducer(func() actor.Actor { return newManagerActor(cfg, published, subscribers) },
		actor.WithSupervisor(strategy),
		actor.WithReceiverMiddleware(actors.PanicStack(cfg.Logger)))
	pid, err := system.Root.SpawnNamed(props, cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("start manager actor %q: %w", cfg.Name, err)
	}
	return &Manager{system: system, pid: pid, published: published, timeout: cfg.ShutdownTimeout, log: cfg.Logger}, nil
}

// PID is the manager actor's address.
func (m *Manager) PID() *actor.PID { return m.pid }

// Plugins returns the latest fingerprint of every plugin the manager runs
// an instance for (or whose instance failed), sorted by type then name. It
// never waits for the actor: it reads the latest copy the actor published.
// The values are shared: treat them as read-only.
func (m *Manager) Plugins() []*messages.CSIFingerprint {
	return sortedFingerprints(m.published.Load())
}

// StopInstances stops every plugin instance in parallel, each publishing
// a final unhealthy fingerprint, and returns once all have stopped. It
// waits at most the configured ShutdownTimeout (less when ctx ends sooner);
// the error names the instances that had not stopped by then. The manager
// actor itself goes on answering queries and subscriptions, and starts no
// instance again, until Shutdown: so its subscribers (the CSI catalog) can
// take in every final fingerprint and stop before it does. A second call
// returns the first call's result.
func (m *Manager) StopInstances(ctx context.Context) error {
	m.drain.Do(func() { m.drainErr = m.stopInstances(ctx) })
	return m.drainErr
}

// Shutdown stops every plugin instance (StopInstances, if it has not run),
// then the manager actor. A second call returns the first call's result.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.shutdown.Do(func() { m.err = m.stop(ctx) })
	return m.err
}

func (m *Manager) stopInstances(ctx context.Context) error {
	timeout := m.timeout
	if deadline, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(deadline)*9/10)
	}
	reply, err := actors.Ask(ctx, m.system, m.pid, func(replyTo *actor.PID) any {
		return &messages.ShutdownCSIManager{ReplyTo: replyTo, Timeout: durationpb.New(timeout)}
	})
	res, ok := reply.(*messages.ShutdownCSIManagerResponse)
	switch {
	case err != nil:
		return fmt.Errorf("shut down the CSI manager: %w", err)
	case !ok:
		return fmt.Errorf("shut down the CSI manager: unexpected answer %T", reply)
	case len(res.GetNotStopped()) > 0:
		return fmt.Errorf("shut down the CSI manager: %d plugin instances did not stop within %v: %s",
			len(res.GetNotStopped()), timeout, strings.Join(res.GetNotStopped(), ", "))
	}
	return nil
}

func (m *Manager) stop(ctx context.Context) error {
	if err := m.StopInstances(ctx); err != nil {
		m.system.Root.Stop(m.pid) // it terminates once the instances do
		return err
	}
	if err := m.system.Root.StopFuture(m.pid).Wait(); err != nil {
		return fmt.Errorf("stop the CSI manager actor: %w", err)
	}
	m.log.Info("CSI manager shut down")
	return nil
}
