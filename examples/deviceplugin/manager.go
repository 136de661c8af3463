// Package deviceplugin is a whole plugin type defined outside plugvisor,
// "device-plugin": each registered device plugin gets one supervised
// instance actor that checks its health over a small JSON protocol of the
// package's own (Check, and a fake plugin, Serve). A failed check restarts
// the instance after a backoff, then gives up; a newer allocation takes
// over from the older one. Its messages are plain Go structs.
//
// Manager joins the shipped agent through agent.Config.PluginTypes:
//
//	agent.Start(agent.Config{PluginTypes: []agent.PluginType{
//		{Name: deviceplugin.Type, Manager: deviceplugin.New(deviceplugin.Config{})}}})
package deviceplugin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/actors/plugintype"
	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/supervisor"
)

// Type is the registry plugin type the manager serves.
const Type = "device-plugin"

// Config configures a Manager; the zero value works.
type Config struct {
	// Supervision is the instances' restart policy (supervisor's defaults
	// when zero); OnGiveUp must be Stop, the default.
	Supervision supervisor.Spec
	// HealthTimeout bounds one health check (default 5s).
	HealthTimeout time.Duration
}

// Subscribe is sent to the manager by an actor that wants every
// DeviceHealth from now on.
type Subscribe struct{ Subscriber *actor.PID }

// closeInstances is sent to the manager by Shutdown: it stops every
// instance and answers instancesClosed once all have terminated, after
// their last reports.
type (
	closeInstances  struct{ replyTo *actor.PID }
	instancesClosed struct{}
)

// Manager is the facade over the device-plugin manager actor; it is an
// agent.TypeManager.
type Manager struct {
	cfg       Config
	system    *actor.ActorSystem
	pid       *actor.PID
	published atomic.Pointer[[]agent.InstanceHealth]
}

// New returns a manager to Start.
func New(cfg Config) *Manager {
	m := &Manager{cfg: cfg}
	m.published.Store(&[]agent.InstanceHealth{})
	return m
}

// Start implements agent.TypeManager: it starts the manager actor, which
// subscribes to the registry for plugins of env.Type.
func (m *Manager) Start(env agent.TypeEnv) error {
	if err := m.cfg.Supervision.StopsOnGiveUp("Config.Supervision"); err != nil {
		return fmt.Errorf("deviceplugin: %w", err)
	}
	strategy, err := supervisor.NewStrategy(m.cfg.Supervision)
	if err != nil {
		return fmt.Errorf("deviceplugin: %w", err)
	}
	icfg := plugintype.Config{Types: []string{env.Type}, Registry: env.Registry.PID(), ResyncInterval: env.ResyncInterval,
		Snapshot: func() plugintype.Snapshot { return env.Registry.Snapshot() }, Logger: env.Logger, Metrics: env.Metrics}
	if err := icfg.Validate(); err != nil {
		return fmt.Errorf("deviceplugin: %w", err)
	}
	subscribers := plugintype.NewSubscribers() // outlives a restart of the manager
	props := actor.PropsFromProducer(func() actor.Actor {
		a := &managerActor{env: env, timeout: cmp.Or(m.cfg.HealthTimeout, 5*time.Second),
			health: map[string]agent.InstanceHealth{}, subscribers: subscribers, published: &m.published}
		a.instances = plugintype.New(icfg, a)
		return a
	}, actor.WithSupervisor(strategy))
	if m.pid, err = env.System.Root.SpawnNamed(props, env.Type+"-manager"); err != nil {
		return fmt.Errorf("deviceplugin: %w", err)
	}
	m.system = env.System
	return nil
}

// PID is the manager actor's address, for Subscribe.
func (m *Manager) PID() *actor.PID { return m.pid }

// Instances implements agent.TypeManager: the latest health of every
// plugin, by name, without waiting for the actor.
func (m *Manager) Instances() []agent.InstanceHealth { return *m.published.Load() }

// Shutdown implements agent.TypeManager: it stops the instances and waits
// until subscribers have their last reports (or ctx ends), then stops the
// manager.
func (m *Manager) Shutdown(ctx context.Context) error {
	if m.pid == nil {
		return nil
	}
	_, err := actors.Ask(ctx, m.system, m.pid, func(replyTo *actor.PID) any { return &closeInstances{replyTo: replyTo} })
	return errors.Join(err, m.system.Root.StopFuture(m.pid).Wait())
}

// managerActor keeps one instance per plugin (plugintype.Instances), the
// latest health of each, and who hears of it. Subscribers get every
// DeviceHealth in the order the manager received them.
type managerActor struct {
	env         agent.TypeEnv
	timeout     time.Duration
	instances   *plugintype.Instances
	health      map[string]agent.InstanceHealth // by plugin name
	subscribers *plugintype.Subscribers
	published   *atomic.Pointer[[]agent.InstanceHealth]
	closing     []*actor.PID // who waits for the instances to be gone
}

// Receive hands the instances' life cycle to plugintype (which counts
// restarts and give-ups into env.Metrics), then handles reports,
// subscriptions and Shutdown.
func (a *managerActor) Receive(ctx actor.Context) {
	if a.instances.Receive(ctx) {
		return
	}
	switch msg := ctx.Message().(type) {
	case *DeviceHealth:
		if _, current := a.instances.Current(msg.Instance); current {
			a.record(msg)
		}
		a.subscribers.Publish(ctx, msg)
	case *Subscribe:
		a.subscribers.Subscribe(ctx, msg.Subscriber)
	case *closeInstances:
		a.instances.Close(ctx)
		a.closing = append(a.closing, msg.replyTo)
		a.answerClosed(ctx)
	case *actor.Terminated:
		a.subscribers.Drop(msg.GetWho())
	}
}

// InstanceProps implements plugintype.Type.
func (a *managerActor) InstanceProps(ctx actor.Context, p *messages.PluginInfo) (*actor.Props, error) {
	if p.GetConnection().GetSocketPath() == "" {
		return nil, fmt.Errorf("device plugin %s has no socket path", p.GetName())
	}
	return actor.PropsFromProducer(func() actor.Actor {
		return &instance{plugin: p, reportTo: ctx.Self(), interval: a.env.HealthInterval, timeout: a.timeout,
			log: a.env.Logger}
	}), nil
}

// InstanceStopped implements plugintype.Type: the plugin is no longer listed.
func (a *managerActor) InstanceStopped(_ actor.Context, p *messages.PluginInfo, _ *actor.PID, _ string) {
	delete(a.health, p.GetName())
	a.list()
}

// InstanceFailed implements plugintype.Type: the plugin is listed
// unhealthy, and subscribers hear it.
func (a *managerActor) InstanceFailed(ctx actor.Context, p *messages.PluginInfo, _ *actor.PID, reason string) {
	h := &DeviceHealth{Name: p.GetName(), AllocID: p.GetAllocId(), Description: "instance failed: " + reason, Final: true}
	a.record(h)
	a.subscribers.Publish(ctx, h)
}

// InstanceGone implements plugintype.Type: the last one answers Shutdown.
func (a *managerActor) InstanceGone(ctx actor.Context, _ *messages.PluginInfo, _ *actor.PID) {
	a.answerClosed(ctx)
}

func (a *managerActor) answerClosed(ctx actor.Context) {
	if a.instances.Len() > 0 {
		return
	}
	for _, pid := range a.closing {
		ctx.Send(pid, &instancesClosed{})
	}
	a.closing = nil
}

func (a *managerActor) record(h *DeviceHealth) {
	a.health[h.Name] = agent.InstanceHealth{Name: h.Name, Healthy: h.Healthy, Description: h.Description}
	a.list()
	if a.env.Metrics != nil {
		a.env.Metrics.PluginHealth(a.env.Type, h.Name, h.Healthy)
	}
}

func (a *managerActor) list() {
	out := make([]agent.InstanceHealth, 0, len(a.health))
	for _, h := range a.health {
		out = append(out, h)
	}
	slices.SortFunc(out, func(x, y agent.InstanceHealth) int { return cmp.Compare(x.Name, y.Name) })
	a.published.Store(&out)
}
