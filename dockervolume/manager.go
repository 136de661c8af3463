package dockervolume

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
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

// Default values of Config.
const (
	DefaultHealthInterval = 10 * time.Second
	DefaultHealthTimeout  = 5 * time.Second
	DefaultManagerName    = "docker-volume-manager"
)

// Config configures the docker-volume manager. Only Registry is required.
type Config struct {
	// Registry is where the manager learns which volume plugins run.
	Registry *registry.Registry
	// Logger receives the manager's and its instances' log lines; nil discards them.
	Logger hclog.Logger
	// Supervision is the instances' restart policy; its OnGiveUp must be
	// Stop (the default): an instance that gives up is reported unhealthy.
	Supervision supervisor.Spec
	// ResyncInterval is the time between comparisons of the instances with
	// a registry snapshot (default plugintype.DefaultResyncInterval).
	ResyncInterval time.Duration
	// HealthInterval is the time between health checks (default DefaultHealthInterval).
	HealthInterval time.Duration
	// HealthTimeout bounds one health check (default DefaultHealthTimeout).
	HealthTimeout time.Duration
	// Name is the manager actor's name (default DefaultManagerName).
	Name string
	// Metrics, when set, hears of supervision decisions and health.
	Metrics Metrics
}

// Metrics counts what the manager's supervision decides, and
// follows each current plugin's health.
type Metrics interface {
	plugintype.Metrics // the supervision's decisions, counted by plugintype
	PluginHealth(ptype, name string, healthy bool)
}

// ErrInvalidConfig: Start was given a config it cannot use.
var ErrInvalidConfig = errclass.New(errclass.Invalid, "invalid manager config")

// validate reports every problem with c, each naming its field.
func (c Config) validate() error {
	var problems []error
	if c.Registry == nil {
		problems = append(problems, errors.New("a Registry is required"))
	}
	for field, d := range map[string]time.Duration{"HealthInterval": c.HealthInterval, "HealthTimeout": c.HealthTimeout,
		"ResyncInterval": c.ResyncInterval} {
		if d < 0 {
			problems = append(problems, fmt.Errorf("%s is %v, must not be negative (zero takes the default)", field, d))
		}
	}
	problems = append(problems, c.Supervision.StopsOnGiveUp("Supervision"))
	if err := errors.Join(problems...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

func (c Config) withDefaults() Config {
	c.Logger = cmp.Or[hclog.Logger](c.Logger, hclog.NewNullLogger()).Named("docker-volume")
	c.HealthInterval = cmp.Or(c.HealthInterval, DefaultHealthInterval)
	c.HealthTimeout = cmp.Or(c.HealthTimeout, DefaultHealthTimeout)
	c.Name = cmp.Or(c.Name, DefaultManagerName)
	return c
}

// Manager is the Go facade over the docker-volume manager actor, which
// runs one supervised instance actor per volume plugin (see
// plugintype.Instances), each checking its plugin's health. Actors talk to
// the manager at PID: SubscribeDockerVolume.
type Manager struct {
	system    *actor.ActorSystem
	pid       *actor.PID
	published *atomic.Pointer[[]*messages.DockerVolumePluginHealth]
}

// Start starts the docker-volume manager actor in system.
func Start(system *actor.ActorSystem, cfg Config) (*Manager, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	icfg := plugintype.Config{
		Types: []string{PluginType}, Registry: cfg.Registry.PID(), ResyncInterval: cfg.ResyncInterval,
		Snapshot: func() plugintype.Snapshot { return cfg.Registry.Snapshot() }, Logger: cfg.Logger, Metrics: cfg.Metrics,
	}
	if err := icfg.Validate(); err != nil {
		return nil, err
	}
	strategy, err := supervisor.NewStrategy(cfg.Supervision)
	if err != nil {
		return nil, err
	}
	published := &atomic.Pointer[[]*messages.DockerVolumePluginHealth]{}
	published.Store(&[]*messages.DockerVolumePluginHealth{})
	subscribers := plugintype.NewSubscribers() // outlives a restart after a panic
	props := actor.PropsFromProducer(func() actor.Actor {
		a := &managerActor{cfg: cfg, health: map[string]*messages.DockerVolumePluginHealth{},
			subscribers: subscribers, published: published}
		a.instances = plugintype.New(icfg, a)
		return a
	}, actor.WithSupervisor(strategy), actor.WithReceiverMiddleware(actors.PanicStack(cfg.Logger)))
	pid, err := system.Root.SpawnNamed(props, cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("start manager actor %q: %w", cfg.Name, err)
	}
	return &Manager{system: system, pid: pid, published: published}, nil
}

// PID is the manager actor's address.
func (m *Manager) PID() *actor.PID { return m.pid }

// Plugins returns the latest health of every volume plugin, sorted by
// name, without waiting for the actor. The values are shared: treat them
// as read-only.
func (m *Manager) Plugins() []*messages.DockerVolumePluginHealth { return *m.published.Load() }

// Shutdown stops every instance, then the manager actor.
func (m *Manager) Shutdown() error { return m.system.Root.StopFuture(m.pid).Wait() }

// managerActor is the docker-volume manager: plugintype.Instances keeps its
// instances; it keeps the latest health of each plugin and who hears of it.
//
// Event contract for SubscribeDockerVolume subscribers: every
// DockerVolumePluginHealth of every instance (a replaced instance's final
// one included), in the order the manager received them; nothing is lost
// while the subscriber lives; a slow subscriber delays nobody; one that
// terminates is dropped. The messages are shared: treat them as read-only.
type managerActor struct {
	cfg         Config
	instances   *plugintype.Instances
	health      map[string]*messages.DockerVolumePluginHealth // by plugin name
	subscribers *plugintype.Subscribers
	published   *atomic.Pointer[[]*messages.DockerVolumePluginHealth]
}

// Receive hands the instances' life cycle to plugintype, then handles
// health reports and subscriptions.
func (a *managerActor) Receive(ctx actor.Context) {
	if a.instances.Receive(ctx) {
		return
	}
	switch msg := ctx.Message().(type) {
	case *messages.DockerVolumePluginHealth:
		a.onHealth(ctx, msg)
	case *messages.SubscribeDockerVolume:
		a.onSubscribe(ctx, msg)
	case *actor.Terminated:
		a.subscribers.Drop(msg.GetWho())
	}
}

// InstanceProps implements plugintype.Type.
func (a *managerActor) InstanceProps(ctx actor.Context, plugin *messages.PluginInfo) (*actor.Props, error) {
	return newInstanceProps(instanceConfig{plugin: plugin, reportTo: ctx.Self(), interval: a.cfg.HealthInterval,
		timeout: a.cfg.HealthTimeout, log: a.cfg.Logger.Named("instance")}), nil
}

// InstanceStopped implements plugintype.Type: the plugin's health is no
// longer listed.
func (a *managerActor) InstanceStopped(_ actor.Context, plugin *messages.PluginInfo, _ *actor.PID, _ string) {
	delete(a.health, plugin.GetName())
	a.list()
}

// InstanceFailed implements plugintype.Type: the plugin is listed unhealthy.
func (a *managerActor) InstanceFailed(ctx actor.Context, plugin *messages.PluginInfo, instance *actor.PID, reason string) {
	a.record(ctx, &messages.DockerVolumePluginHealth{Name: plugin.GetName(), AllocId: plugin.GetAllocId(),
		Description: "plugin instance failed: " + reason, Instance: instance, Final: true}, true)
}

// InstanceGone implements plugintype.Type; nothing is left to do.
func (a *managerActor) InstanceGone(actor.Context, *messages.PluginInfo, *actor.PID) {}

func (a *managerActor) onHealth(ctx actor.Context, msg *messages.DockerVolumePluginHealth) {
	if a.instances.Known(msg.GetInstance()) {
		_, current := a.instances.Current(msg.GetInstance())
		a.record(ctx, msg, current)
	}
}

// record publishes h, and lists it when it is about the current instance.
func (a *managerActor) record(ctx actor.Context, h *messages.DockerVolumePluginHealth, current bool) {
	if current {
		a.health[h.GetName()] = h
		a.list()
		if a.cfg.Metrics != nil {
			a.cfg.Metrics.PluginHealth(PluginType, h.GetName(), h.GetHealthy())
		}
	}
	a.subscribers.Publish(ctx, h)
}

func (a *managerActor) list() {
	out := make([]*messages.DockerVolumePluginHealth, 0, len(a.health))
	for _, h := range a.health {
		out = append(out, h)
	}
	slices.SortFunc(out, func(x, y *messages.DockerVolumePluginHealth) int { return cmp.Compare(x.GetName(), y.GetName()) })
	a.published.Store(&out)
}

func (a *managerActor) onSubscribe(ctx actor.Context, msg *messages.SubscribeDockerVolume) {
	var replay []any
	if msg.GetReplay() {
		for _, h := range *a.published.Load() {
			replay = append(replay, h)
		}
	}
	a.subscribers.Subscribe(ctx, msg.GetSubscriber(), replay...)
}
