package discovery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/actors/plugintype"
	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/supervisor"
)

// DefaultName is the discovery actor's name when Config.Name is empty.
const DefaultName = "discovery"

// Sentinel errors of the Discovery facade.
var (
	// ErrDoesNotImplement: Get found the plugin, registered under other
	// types than the one asked for.
	ErrDoesNotImplement = errclass.New(errclass.Conflict, "does not implement")
	// ErrInvalidConfig: Start was given a config it cannot use.
	ErrInvalidConfig = errclass.New(errclass.Invalid, "invalid config")
	// ErrShutdown: the Discovery is shut down.
	ErrShutdown = errclass.New(errclass.ShutDown, "discovery shut down")
)

// DefaultLookupBackoff returns the waits of Get between lookups of a plugin
// that is not registered yet, as Docker's: 1, 2, 4 and 8 seconds.
func DefaultLookupBackoff() []time.Duration {
	return []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
}

// DefaultRetry returns the fast backoff of failed activations when
// Config.Retry is zero: after 250ms, doubling up to 30s, for 8 retries
// within 10 minutes (about a minute of trying, as Docker's 30 seconds, and
// some). After that the slow retry takes over (Config.SlowRetry).
func DefaultRetry() supervisor.Spec {
	return supervisor.Spec{
		MaxRestarts: 8, Within: 10 * time.Minute, InitialDelay: 250 * time.Millisecond,
		MaxDelay: 30 * time.Second, Multiplier: 2, Jitter: 0.2,
	}
}

// Defaults of Config.
const (
	// DefaultSlowRetry is the time between activations of a plugin whose
	// fast backoff gave up.
	DefaultSlowRetry = time.Minute
	// DefaultGrace is how long a plugin's file may be gone before the
	// plugin is: a socket recreated within it is the same plugin.
	DefaultGrace = 3 * time.Second
)

// Metrics hears of discovery's failed activations; implementations must be
// safe for concurrent use.
type Metrics interface {
	// ActivationFailed counts one failed activation of plugin name, and
	// what follows it: "retry" (the fast backoff), "slow" (the slow retry)
	// or "wait" (for the file to change).
	ActivationFailed(name, then string)
}

// Config configures discovery. Dirs and Registry are required.
type Config struct {
	// Dirs are the directories to watch; each must be absolute. One that
	// does not exist yet is watched once it does.
	Dirs Dirs
	// Registry is where discovered plugins are registered.
	Registry *registry.Registry
	// Logger receives discovery's log lines; nil discards them.
	Logger hclog.Logger
	// RescanInterval is the time between the rescans that back up
	// fsnotify (default DefaultRescanInterval).
	RescanInterval time.Duration
	// ActivateTimeout bounds one Docker handshake (default DefaultActivateTimeout).
	ActivateTimeout time.Duration
	// CSITimeout bounds one CSI identity handshake (default DefaultCSITimeout).
	CSITimeout time.Duration
	// Retry is the fast backoff of failed activations (default
	// DefaultRetry()): its delays are the waits between attempts, and its
	// limit when the slow retry takes over. Its Decider is consulted with
	// the error.
	Retry supervisor.Spec
	// SlowRetry is the time between activations once the fast backoff gave
	// up (default DefaultSlowRetry): a plugin is retried for as long as its
	// file is there.
	SlowRetry time.Duration
	// Grace is how long a plugin's file may be missing before the plugin
	// is gone (default DefaultGrace): a socket removed and recreated within
	// it keeps its registrations and its place.
	Grace time.Duration
	// Clock times the retries and the grace period (default the real one).
	Clock supervisor.Clock
	// Metrics, when set, counts failed activations.
	Metrics Metrics
	// Supervision is the restart policy of the watcher and activator
	// actors when they fail (panic); its OnGiveUp must be Stop.
	Supervision supervisor.Spec
	// LookupBackoff are the waits of Get between lookups of a plugin that
	// is not registered (default DefaultLookupBackoff()).
	LookupBackoff []time.Duration
	// Name is the discovery actor's name (default DefaultName).
	Name string
}

func (c Config) validate() error {
	var problems []error
	if c.Registry == nil {
		problems = append(problems, errors.New("a registry is required"))
	}
	if len(c.Dirs.Sockets)+len(c.Dirs.Specs) == 0 {
		problems = append(problems, errors.New("at least one directory is required"))
	}
	_, errs := c.Dirs.usable()
	problems = append(problems, errs...)
	for field, d := range map[string]time.Duration{"RescanInterval": c.RescanInterval, "ActivateTimeout": c.ActivateTimeout,
		"CSITimeout": c.CSITimeout, "SlowRetry": c.SlowRetry, "Grace": c.Grace} {
		if d < 0 {
			problems = append(problems, fmt.Errorf("%s is %v, must not be negative", field, d))
		}
	}
	if slices.ContainsFunc(c.LookupBackoff, func(d time.Duration) bool { return d < 0 }) {
		problems = append(problems, errors.New("LookupBackoff durations must not be negative"))
	}
	problems = append(problems, c.Supervision.StopsOnGiveUp("Supervision"), c.Retry.Validate(), c.Supervision.Validate())
	if err := errors.Join(problems...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

func (c Config) withDefaults() Config {
	c.Logger = cmp.Or[hclog.Logger](c.Logger, hclog.NewNullLogger()).Named("discovery")
	c.RescanInterval = cmp.Or(c.RescanInterval, DefaultRescanInterval)
	c.ActivateTimeout = cmp.Or(c.ActivateTimeout, DefaultActivateTimeout)
	c.CSITimeout = cmp.Or(c.CSITimeout, DefaultCSITimeout)
	c.SlowRetry = cmp.Or(c.SlowRetry, DefaultSlowRetry)
	c.Grace = cmp.Or(c.Grace, DefaultGrace)
	c.Clock = cmp.Or(c.Clock, supervisor.RealClock)
	if reflect.ValueOf(c.Retry).IsZero() {
		c.Retry = DefaultRetry()
	}
	if c.LookupBackoff == nil {
		c.LookupBackoff = DefaultLookupBackoff()
	}
	c.Name = cmp.Or(c.Name, DefaultName)
	return c
}

// Discovery is the Go facade over the discovery actor, which runs one
// watcher per directory and one activator per plugin found, and keeps the
// registry in step with what is on disk. Get and GetAll read the registry's
// snapshots; Handle subscribes to it. Its methods are safe for concurrent use.
type Discovery struct {
	system    *actor.ActorSystem
	pid       *actor.PID
	registry  *registry.Registry
	backoff   []time.Duration
	published *atomic.Pointer[[]*messages.DiscoveredPlugin]
	log       hclog.Logger

	mu       sync.Mutex
	handlers []*actor.PID
	closed   bool
}

// Start starts the discovery actor in system. It returns at once; plugins
// are registered as they are found and activated.
func Start(system *actor.ActorSystem, cfg Config) (*Discovery, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	strategy, err := supervisor.NewStrategy(cfg.Supervision)
	if err != nil {
		return nil, err
	}
	published := &atomic.Pointer[[]*messages.DiscoveredPlugin]{}
	published.Store(&[]*messages.DiscoveredPlugin{})
	subscribers := plugintype.NewSubscribers() // outlives a restart after a panic
	props := actor.PropsFromProducer(func() actor.Actor { return newDiscoveryActor(cfg, published, subscribers) },
		actor.WithSupervisor(strategy), actor.WithReceiverMiddleware(actors.PanicStack(cfg.Logger)))
	pid, err := system.Root.SpawnNamed(props, cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("start actor %q: %w", cfg.Name, err)
	}
	return &Discovery{system: system, pid: pid, registry: cfg.Registry, backoff: cfg.LookupBackoff,
		published: published, log: cfg.Logger}, nil
}

// PID is the discovery actor's address: SubscribeDiscovery.
func (d *Discovery) PID() *actor.PID { return d.pid }

// Plugins returns what discovery knows of every plugin found on disk,
// sorted by name, without waiting for the actor. The values are shared:
// treat them as read-only.
func (d *Discovery) Plugins() []*messages.DiscoveredPlugin { return *d.published.Load() }

// typeOf returns the plugin type of a Docker interface ("VolumeDriver" →
// "docker-volume"); a plugin type ("docker-volume", "csi-node") is itself.
func typeOf(implements string) (string, error) {
	if err := registry.ValidateID("interface", implements); err != nil {
		return "", err
	}
	return TypesFor(Manifest{Implements: []string{implements}})[0], nil
}

// Handle makes fn run once for each allocation of each plugin that
// implements iface (a Docker interface such as "VolumeDriver", or a plugin
// type such as "csi-node"): for every one registered now, and for every one
// registered later, until Shutdown. A newer allocation of a plugin (a
// takeover) runs fn again.
//
// Each Handle is an actor subscribed to the registry with a replay, so fn
// runs on that actor's goroutine, one plugin at a time; a slow fn delays
// only its own handler, and a panicking fn is logged and does not stop it.
func (d *Discovery) Handle(iface string, fn func(name string, plugin *messages.PluginInfo)) error {
	ptype, err := typeOf(iface)
	if err != nil {
		return err
	}
	if fn == nil {
		return fmt.Errorf("%w: Handle needs a function", ErrInvalidConfig)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrShutdown
	}
	h := &handler{ptype: ptype, registry: d.registry.PID(), fn: fn, log: d.log.With("handles", iface)}
	pid := d.system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return h },
		actor.WithReceiverMiddleware(actors.PanicStack(d.log))))
	d.handlers = append(d.handlers, pid)
	return nil
}

// Get returns the current registration of plugin name as a plugin that
// implements implements (a Docker interface or a plugin type). A plugin
// registered only under other types gives ErrDoesNotImplement at once. A
// plugin not registered at all is looked up again after each wait of the
// lookup backoff (sooner when the registry changes) before Get gives up
// with ErrNotFound; ctx may end it earlier.
func (d *Discovery) Get(ctx context.Context, name, implements string) (*messages.PluginInfo, error) {
	ptype, err := typeOf(implements)
	if err != nil {
		return nil, err
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	asked := false
	for step := 0; ; {
		s := d.registry.Snapshot()
		if p, ok := s.Current(ptype, name); ok {
			return p, nil
		}
		if types := typesOf(s, name); len(types) > 0 {
			return nil, fmt.Errorf("%w: plugin %q does not implement %s (%s); it is registered as %s",
				ErrDoesNotImplement, name, implements, ptype, strings.Join(types, ", "))
		}
		if step == len(d.backoff) {
			return nil, &PluginError{Name: name, Kind: ErrNotFound,
				Err: fmt.Errorf("not registered after %d lookups", len(d.backoff)+1)}
		}
		if !asked {
			// Lazy activation: a plugin found but waiting out a backoff is
			// tried now, and the directories are looked at again.
			d.system.Root.Send(d.pid, &activateNow{name: name})
			asked = true
		}
		if timer == nil {
			timer = time.NewTimer(d.backoff[step])
		}
		select {
		case <-timer.C:
			step, timer = step+1, nil
		case <-s.Changed():
		case <-ctx.Done():
			return nil, fmt.Errorf("looking up plugin %q: %w", name, ctx.Err())
		}
	}
}

// typesOf lists the types plugin name is registered under in s.
func typesOf(s *registry.Snapshot, name string) []string {
	var out []string
	for _, t := range s.Types() {
		if _, ok := s.Current(t, name); ok {
			out = append(out, t)
		}
	}
	return out
}

// GetAll returns the current registration of every plugin that implements
// implements (a Docker interface or a plugin type), sorted by name. The
// values are shared: treat them as read-only.
func (d *Discovery) GetAll(implements string) ([]*messages.PluginInfo, error) {
	ptype, err := typeOf(implements)
	if err != nil {
		return nil, err
	}
	return d.registry.Snapshot().List(ptype), nil
}

// Shutdown stops the handlers, then the discovery actor with its watchers
// and activators. Registrations stay in the registry: the plugins outlive
// the agent, and the next start finds them again (and removes those whose
// file is gone). A second call returns nil.
func (d *Discovery) Shutdown() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	handlers := d.handlers
	d.mu.Unlock()
	var errs []error
	for _, pid := range append(handlers, d.pid) {
		if err := d.system.Root.StopFuture(pid).Wait(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("shut down: %w", err)
	}
	return nil
}
