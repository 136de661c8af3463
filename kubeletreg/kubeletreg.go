package kubeletreg

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/supervisor"
)

// DefaultName is the watcher actor's name when Config.Name is empty.
const DefaultName = "kubelet-registration"

// KubeletDir is kubelet's own registration directory.
const KubeletDir = "/var/lib/kubelet/plugins_registry"

// Defaults of Config.
const (
	// DefaultTimeout bounds each call to a registration socket and each
	// call to the plugin's CSI endpoint, as kubelet's 10 seconds.
	DefaultTimeout = 10 * time.Second
	// DefaultRescanInterval is the time between the rescans that back up
	// fsnotify.
	DefaultRescanInterval = 5 * time.Second
	// DefaultSlowRetry is the time between attempts once the fast backoff
	// gave up.
	DefaultSlowRetry = time.Minute
)

// Options put on every registration the watcher makes, so that it knows
// its own registrations in the registry.
const (
	// OptionSocket is the path of the registration socket.
	OptionSocket = "kubelet.registration"
)

// KindRegistration is the Kind of the watcher's plugins in the
// discovered-plugins view.
const KindRegistration = "kubelet"

// ErrInvalidConfig: Start was given a config it cannot use.
var ErrInvalidConfig = errclass.New(errclass.Invalid, "invalid config")

// DefaultRetry returns the fast backoff of failed registrations when
// Config.Retry is zero: after 500ms (kubelet's first wait), doubling up to
// 30s, for 8 retries within 10 minutes; then the slow retry takes over.
func DefaultRetry() supervisor.Spec {
	return supervisor.Spec{
		MaxRestarts: 8, Within: 10 * time.Minute, InitialDelay: 500 * time.Millisecond,
		MaxDelay: 30 * time.Second, Multiplier: 2, Jitter: 0.2,
	}
}

// Metrics hears of refused registrations; implementations must be safe for
// concurrent use.
type Metrics interface {
	// Refused counts one refused registration, by reason (see Reasons).
	Refused(reason string)
}

// Config configures the watcher. Dirs and Registry are required.
type Config struct {
	// Dirs are the registration directories to watch (kubelet's is
	// KubeletDir); each must be absolute. One that does not exist yet is
	// watched once it does.
	Dirs []string
	// Registry is where registered plugins go.
	Registry *registry.Registry
	// Logger receives the watcher's log lines; nil discards them.
	Logger hclog.Logger
	// Timeout bounds each call to a registration socket or a CSI endpoint
	// (default DefaultTimeout).
	Timeout time.Duration
	// RescanInterval is the time between rescans (default DefaultRescanInterval).
	RescanInterval time.Duration
	// Retry is the fast backoff of registrations that failed for a reason
	// that may pass (default DefaultRetry()).
	Retry supervisor.Spec
	// SlowRetry is the time between attempts once the fast backoff gave up
	// (default DefaultSlowRetry).
	SlowRetry time.Duration
	// Clock times the retries (default the real one).
	Clock supervisor.Clock
	// Metrics, when set, counts refused registrations.
	Metrics Metrics
	// Supervision is the restart policy of the watcher actor when it fails
	// (panics); its OnGiveUp must be Stop.
	Supervision supervisor.Spec
	// Name is the watcher actor's name (default DefaultName).
	Name string
}

func (c Config) validate() error {
	var problems []error
	if c.Registry == nil {
		problems = append(problems, errors.New("a registry is required (Registry)"))
	}
	if len(c.Dirs) == 0 {
		problems = append(problems, errors.New("at least one registration directory is required (Dirs)"))
	}
	for _, d := range c.Dirs {
		if !filepath.IsAbs(d) {
			problems = append(problems, fmt.Errorf("registration directory %q is not absolute; give the full path from /", d))
		}
	}
	for field, d := range map[string]time.Duration{"Timeout": c.Timeout, "RescanInterval": c.RescanInterval, "SlowRetry": c.SlowRetry} {
		if d < 0 {
			problems = append(problems, fmt.Errorf("%s is %v; give a positive duration, or 0 for the default", field, d))
		}
	}
	problems = append(problems, c.Supervision.StopsOnGiveUp("Supervision"), c.Retry.Validate(), c.Supervision.Validate())
	if err := errors.Join(problems...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

func (c Config) withDefaults() Config {
	c.Logger = cmp.Or[hclog.Logger](c.Logger, hclog.NewNullLogger()).Named("kubelet-registration")
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.RescanInterval = cmp.Or(c.RescanInterval, DefaultRescanInterval)
	c.SlowRetry = cmp.Or(c.SlowRetry, DefaultSlowRetry)
	c.Clock = cmp.Or(c.Clock, supervisor.RealClock)
	if reflect.ValueOf(c.Retry).IsZero() {
		c.Retry = DefaultRetry()
	}
	c.Dirs = slices.Compact(slices.Sorted(slices.Values(c.Dirs)))
	c.Name = cmp.Or(c.Name, DefaultName)
	return c
}

// AllocID returns the alloc ID of the plugin behind the registration
// socket at path: "kubelet-" and 12 hex digits of the SHA-256 of the path.
// The same socket always gives the same ID, so a sidecar that restarts
// registers the same allocation again, and keeps its place in time.
func AllocID(socket string) string {
	sum := sha256.Sum256([]byte(socket))
	return "kubelet-" + hex.EncodeToString(sum[:6])
}

// Watcher is the Go facade over the watcher actor. Its methods are safe
// for concurrent use.
type Watcher struct {
	system    *actor.ActorSystem
	pid       *actor.PID
	published *atomic.Pointer[[]*messages.DiscoveredPlugin]
}

// Start starts the watcher actor in system. It returns at once; plugins
// are registered as their registration sockets appear.
func Start(system *actor.ActorSystem, cfg Config) (*Watcher, error) {
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
	props := actor.PropsFromProducer(func() actor.Actor { return newWatcherActor(cfg, published) },
		actor.WithSupervisor(strategy), actor.WithReceiverMiddleware(actors.PanicStack(cfg.Logger)))
	pid, err := system.Root.SpawnNamed(props, cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("start actor %q: %w", cfg.Name, err)
	}
	return &Watcher{system: system, pid: pid, published: published}, nil
}

// PID is the watcher actor's address.
func (w *Watcher) PID() *actor.PID { return w.pid }

// Plugins returns what the watcher knows of every registration socket,
// sorted by socket path, without waiting for the actor, in the shape of
// discovery's plugins (Kind KindRegistration, Source the socket). The
// values are shared: treat them as read-only.
func (w *Watcher) Plugins() []*messages.DiscoveredPlugin { return *w.published.Load() }

// Shutdown stops the watcher. Registrations stay in the registry: the
// next start removes those whose socket went away meanwhile.
func (w *Watcher) Shutdown() error {
	if err := w.system.Root.StopFuture(w.pid).Wait(); err != nil {
		return fmt.Errorf("shut down: %w", err)
	}
	return nil
}
