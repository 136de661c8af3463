// Package plugintype is the generic half of a plugin-type manager. It is
// the bookkeeping that keeps one supervised instance actor per plugin of
// some registry plugin types, whatever those instances do.
//
// An embedder adds a plugin type of its own with it, from outside
// plugvisor. It writes a manager actor that:
//   - embeds an *Instances (New) and hands it every message first;
//   - implements Type, the part only it knows: what an instance is, and
//     what to say when one is replaced, fails or is gone;
//   - supervises its instances with actor.WithSupervisor and a
//     supervisor.Strategy. Instances reads the *messages.ChildSupervised
//     events the strategy sends.
//
// examples/deviceplugin is a whole type. dockervolume and csi/manager
// embed Instances too.
//
// Instances keeps one instance per (type, name), serving the plugin's
// current allocation. It takes over for a newer allocation. It stops the
// instance of a plugin that is gone. Every ResyncInterval it corrects any
// difference from a registry snapshot. It reports an instance that gives
// up as failed. The whole contract, names, takeover and Close included, is
// in ARCHITECTURE.md, "Plugin instances".
package plugintype

import (
	"fmt"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/messages"
)

// DefaultResyncInterval is Config.ResyncInterval when none is given.
const DefaultResyncInterval = 30 * time.Second

// Snapshot is what Instances reads of the registry at a resync;
// *registry.Snapshot is one.
type Snapshot interface {
	// List returns the current allocation of every plugin of ptype.
	List(ptype string) []*messages.PluginInfo
	// Sequence is the sequence number of the last event the snapshot includes.
	Sequence() uint64
}

// Type is the plugin-type-specific half of a manager, implemented by the
// manager actor that embeds the Instances. Every method runs on the
// manager's goroutine, with its context.
type Type interface {
	// InstanceProps returns the props of an instance actor serving plugin.
	// An error is reported to InstanceFailed, with no instance.
	InstanceProps(ctx actor.Context, plugin *messages.PluginInfo) (*actor.Props, error)
	// InstanceStopped says that instance no longer serves plugin: a newer
	// allocation took over, the plugin was deregistered, a resync found it
	// out of step, or the manager is closing. The instance terminates later
	// (InstanceGone).
	// instance is nil when the plugin had failed, and is now dropped or
	// tried again.
	InstanceStopped(ctx actor.Context, plugin *messages.PluginInfo, instance *actor.PID, why string)
	// InstanceFailed says that plugin is not served: its instance gave up
	// under supervision or stopped by itself, or none could be started
	// (instance is nil then). It is not started again until the registry
	// says something new about the plugin.
	InstanceFailed(ctx actor.Context, plugin *messages.PluginInfo, instance *actor.PID, reason string)
	// InstanceGone says that instance has terminated, after every message
	// it sent the manager.
	InstanceGone(ctx actor.Context, plugin *messages.PluginInfo, instance *actor.PID)
}

// Config configures Instances. Every field but ResyncInterval and Logger
// is required.
type Config struct {
	// Types are the registry plugin types whose plugins get an instance.
	Types []string
	// Registry is the registry actor's address.
	Registry *actor.PID
	// Snapshot returns the registry's latest snapshot, for resyncs.
	Snapshot func() Snapshot
	// ResyncInterval is the time between resyncs (default DefaultResyncInterval).
	ResyncInterval time.Duration
	// Logger receives the log lines about instances; nil discards them.
	Logger hclog.Logger
	// Metrics, when set, hears of the supervision decisions about current
	// instances.
	Metrics Metrics
}

// Metrics counts what the supervision of current instances decides; the
// agent's TypeMetrics is one.
type Metrics interface {
	// InstanceRestarting: the instance of plugin failed and restarts after a backoff.
	InstanceRestarting(plugin *messages.PluginInfo)
	// InstanceGaveUp: the instance of plugin gave up, or stopped by its policy.
	InstanceGaveUp(plugin *messages.PluginInfo)
}

// Resync is sent to the manager by its resync timer, or by its owner for a
// resync now: Instances compares its instances with a registry snapshot,
// stops the extra ones, then starts the missing ones.
type Resync struct{}

// instanceGone is sent by the manager to itself when a child terminated.
// Terminated is a system message, which overtakes user messages;
// instanceGone queues behind the child's last report.
type instanceGone struct{ pid *actor.PID }

// key names a plugin: one instance serves it at a time.
type key struct{ ptype, name string }

func keyOf(p *messages.PluginInfo) key { return key{p.GetType(), p.GetName()} }

// managed is the record of one plugin.
type managed struct {
	info   *messages.PluginInfo // the current allocation, as the registry says
	child  *child               // the instance serving info; nil once it failed
	failed bool
}

// child is one instance actor, current or on its way out.
type child struct {
	pid      *actor.PID
	plugin   *messages.PluginInfo
	restarts uint32 // restarts before it gave up
}

// Instances is the instance bookkeeping of one manager actor. It is part of
// that actor's state and used only on its goroutine.
type Instances struct {
	cfg      Config
	typ      Type
	log      hclog.Logger
	plugins  map[key]*managed
	children map[string]*child // by PID ID, until terminated
	// applied is, per type, the last registry sequence reflected in
	// plugins. Each type has a subscription of its own. Its events and
	// replay can reach the manager before or after another type's. So one
	// sequence for all types would drop an event of one type as stale,
	// because another type's replay was newer.
	applied map[string]uint64
	spawned uint64 // instances started, to name each uniquely
	resync  *time.Timer
	closed  bool // Close was called: registry events and resyncs start nothing
	// stopping is set by Stopping or Restarting. On a stop, protoactor
	// stops the instances and still delivers messages until the last has
	// terminated. While stopping:
	//   - registry events and resyncs start nothing. An instance started
	//     then would be a child nobody stops, and the manager would never
	//     finish stopping.
	//   - an instance that ends has not failed.
	// A restart after a panic holds the manager's messages until the new
	// incarnation starts. The flag covers any restart that does not.
	stopping bool
}

// ErrInvalidConfig is wrapped by every problem Config.Validate reports.
var ErrInvalidConfig = errclass.New(errclass.Invalid, "invalid config")

// Validate reports what is missing from cfg.
func (cfg Config) Validate() error {
	switch {
	case len(cfg.Types) == 0 || cfg.Registry == nil || cfg.Snapshot == nil:
		return fmt.Errorf("%w: Types, Registry and Snapshot are required", ErrInvalidConfig)
	case cfg.ResyncInterval < 0:
		return fmt.Errorf("%w: resync interval %v must not be negative", ErrInvalidConfig, cfg.ResyncInterval)
	}
	return nil
}

// New returns the bookkeeping for a manager implementing typ. cfg must
// pass Validate; zero optional fields get their defaults.
func New(cfg Config, typ Type) *Instances {
	if cfg.ResyncInterval == 0 {
		cfg.ResyncInterval = DefaultResyncInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &Instances{cfg: cfg, typ: typ, log: cfg.Logger, plugins: map[key]*managed{}, children: map[string]*child{},
		applied: map[string]uint64{}}
}

// Receive handles the messages of the instances' life cycle and reports
// whether the message was one of them. It reports false for Started,
// Stopping, Restarting and the Terminated of actors other than instances:
// the manager handles those too. From Stopping or Restarting on, as after
// Close, registry events and resyncs start nothing, and an instance that
// ends then is not reported failed.
func (m *Instances) Receive(ctx actor.Context) bool {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		m.onStarted(ctx)
		return false
	case *actor.Stopping, *actor.Restarting:
		m.stopping = true
		m.stopTimer()
		return false
	case *actor.Terminated:
		return m.onTerminated(ctx, msg)
	case *messages.Subscribed, *messages.PluginRegistered, *messages.PluginUpdated, *messages.PluginDeregistered, *Resync:
		if !m.closed && !m.stopping {
			m.onRegistryNews(ctx, msg)
		}
	case *messages.ChildSupervised:
		m.onChildSupervised(ctx, msg)
	case *instanceGone:
		m.onInstanceGone(ctx, msg)
	default:
		return false
	}
	return true
}

// onRegistryNews handles what the registry says, or a resync.
func (m *Instances) onRegistryNews(ctx actor.Context, msg any) {
	switch msg := msg.(type) {
	case *messages.Subscribed:
		m.onSubscribed(ctx, msg)
	case *messages.PluginRegistered:
		m.onRegistered(ctx, msg)
	case *messages.PluginUpdated:
		m.onUpdated(ctx, msg)
	case *messages.PluginDeregistered:
		m.onDeregistered(ctx, msg)
	case *Resync:
		m.onResync(ctx)
	}
}

// Close stops every instance, for the manager's shutdown: each is logged
// and told to the Type as stopped because the manager is shutting down,
// not as a correction. From then on registry events and resyncs start
// nothing; the instances' supervision reports and ends are still handled.
func (m *Instances) Close(ctx actor.Context) {
	m.closed = true
	m.stopTimer()
	for k := range m.plugins {
		m.remove(ctx, k, "shutting down")
	}
}

// Current returns the plugin instance serves, if it is its plugin's
// current instance.
func (m *Instances) Current(instance *actor.PID) (*messages.PluginInfo, bool) {
	if p := m.currentOf(m.children[instance.GetId()]); p != nil {
		return p.info, true
	}
	return nil, false
}

// Serving returns the allocation that the current instance of plugin
// (ptype, name) serves; nil when no instance serves it (the plugin is not
// registered, its instance failed, or the manager is closing).
func (m *Instances) Serving(ptype, name string) *messages.PluginInfo {
	if p := m.plugins[key{ptype, name}]; p != nil && p.child != nil && !p.failed {
		return p.info
	}
	return nil
}

// Known reports whether instance is a child that has not terminated yet,
// current or not.
func (m *Instances) Known(instance *actor.PID) bool {
	_, ok := m.children[instance.GetId()]
	return ok
}

// Restarts returns how many times the supervision restarted instance
// before it gave up: what a Type's InstanceFailed may report. It is 0 for
// an instance that has not given up, or that has terminated.
func (m *Instances) Restarts(instance *actor.PID) uint32 {
	if c := m.children[instance.GetId()]; c != nil {
		return c.restarts
	}
	return 0
}

// Len is the number of instances that have not terminated yet, current or
// not: after Close, a manager that waits for its instances' last messages
// answers its shutdown when Len is 0 (InstanceGone comes after the
// instance is counted out).
func (m *Instances) Len() int { return len(m.children) }

// Each calls f for the current instance of every plugin, in no order.
func (m *Instances) Each(f func(plugin *messages.PluginInfo, instance *actor.PID)) {
	for _, p := range m.plugins {
		if p.child != nil {
			f(p.info, p.child.pid)
		}
	}
}

func (m *Instances) onStarted(ctx actor.Context) {
	for _, ptype := range m.cfg.Types {
		ctx.Send(m.cfg.Registry, &messages.Subscribe{Type: ptype, Subscriber: ctx.Self(), Replay: true})
	}
	m.scheduleResync(ctx)
}

// fresh reports whether a registry event with sequence seq is news: not
// reflected already by a replay or a resync.
func (m *Instances) fresh(ptype string, seq uint64) bool {
	if !slices.Contains(m.cfg.Types, ptype) || seq <= m.applied[ptype] {
		return false
	}
	m.applied[ptype] = seq
	return true
}

func (m *Instances) onSubscribed(ctx actor.Context, msg *messages.Subscribed) {
	ptype := msg.GetType()
	if !slices.Contains(m.cfg.Types, ptype) || msg.GetSequence() < m.applied[ptype] {
		return // a resync has applied a newer state already
	}
	m.sync(ctx, []string{ptype}, msg.GetCurrent(), "registry replay")
	m.applied[ptype] = max(m.applied[ptype], msg.GetSequence())
}

func (m *Instances) onRegistered(ctx actor.Context, ev *messages.PluginRegistered) {
	if m.fresh(ev.GetPlugin().GetType(), ev.GetSequence()) {
		m.reconcile(ctx, ev.GetPlugin(), "registered")
	}
}

func (m *Instances) onUpdated(ctx actor.Context, ev *messages.PluginUpdated) {
	if m.fresh(ev.GetPlugin().GetType(), ev.GetSequence()) && ev.GetIsCurrent() {
		m.reconcile(ctx, ev.GetPlugin(), "updated")
	}
}

func (m *Instances) onDeregistered(ctx actor.Context, ev *messages.PluginDeregistered) {
	if !m.fresh(ev.GetPlugin().GetType(), ev.GetSequence()) || !ev.GetCurrentChanged() {
		return
	}
	if ev.GetGone() || ev.GetCurrent() == nil {
		m.remove(ctx, keyOf(ev.GetPlugin()), "deregistered")
		return
	}
	m.reconcile(ctx, ev.GetCurrent(), "current allocation deregistered")
}

func (m *Instances) onResync(ctx actor.Context) {
	snapshot := m.cfg.Snapshot()
	// A type whose events already applied are newer than the snapshot is
	// left alone: the snapshot would undo them.
	var ptypes []string
	var current []*messages.PluginInfo
	for _, ptype := range m.cfg.Types {
		if snapshot.Sequence() >= m.applied[ptype] {
			ptypes = append(ptypes, ptype)
			current = append(current, snapshot.List(ptype)...)
		}
	}
	if changed := m.sync(ctx, ptypes, current, "resync"); changed > 0 {
		m.log.Warn("resync found instances out of step with the registry and corrected them", "corrected", changed)
	}
	for _, ptype := range ptypes {
		m.applied[ptype] = snapshot.Sequence()
	}
	m.scheduleResync(ctx)
}

// sync makes the instances of ptypes match current, the current allocation
// of every plugin of those types: it stops the extra instances first, then
// starts the missing ones and replaces the stale ones. It returns how many
// plugins it changed.
func (m *Instances) sync(ctx actor.Context, ptypes []string, current []*messages.PluginInfo, why string) int {
	want := make(map[key]bool, len(current))
	for _, p := range current {
		want[keyOf(p)] = true
	}
	changed := 0
	for k := range m.plugins {
		if slices.Contains(ptypes, k.ptype) && !want[k] {
			m.remove(ctx, k, why)
			changed++
		}
	}
	for _, p := range current {
		if m.reconcile(ctx, p, why) {
			changed++
		}
	}
	return changed
}

// reconcile makes info, the current allocation of its plugin, the one an
// instance serves, and reports whether anything changed. Nothing changes
// when an instance serves it already, or when its instance failed and info
// is not news.
func (m *Instances) reconcile(ctx actor.Context, info *messages.PluginInfo, why string) bool {
	k := keyOf(info)
	p := m.plugins[k]
	if p != nil && proto.Equal(p.info, info) && (p.child != nil || p.failed) {
		return false
	}
	if p == nil {
		p = &managed{}
		m.plugins[k] = p
	}
	m.stopInstance(ctx, p, why)
	p.info, p.failed = info, false
	m.startInstance(ctx, p, why)
	return true
}

// remove stops the plugin's instance and forgets the plugin.
func (m *Instances) remove(ctx actor.Context, k key, why string) {
	if p, ok := m.plugins[k]; ok {
		m.stopInstance(ctx, p, why)
		delete(m.plugins, k)
	}
}

// stopInstance stops the plugin's instance, and tells the Type that the
// plugin is no longer served by it, or no longer failed.
func (m *Instances) stopInstance(ctx actor.Context, p *managed, why string) {
	c := p.child
	if c == nil {
		if p.failed {
			m.typ.InstanceStopped(ctx, p.info, nil, why)
		}
		return
	}
	m.log.Info("stopping plugin instance", "type", c.plugin.GetType(), "name", c.plugin.GetName(),
		"alloc", c.plugin.GetAllocId(), "why", why)
	ctx.Stop(c.pid)
	p.child = nil
	m.typ.InstanceStopped(ctx, c.plugin, c.pid, why)
}

func (m *Instances) startInstance(ctx actor.Context, p *managed, why string) {
	info := p.info
	m.spawned++
	name := fmt.Sprintf("%s:%s:%s:%d", info.GetType(), info.GetName(), info.GetAllocId(), m.spawned)
	props, err := m.typ.InstanceProps(ctx, info)
	var pid *actor.PID
	if err == nil {
		pid, err = ctx.SpawnNamed(props, name)
	}
	if err != nil {
		m.fail(ctx, p, nil, fmt.Sprintf("cannot start: %v", err))
		return
	}
	c := &child{pid: pid, plugin: info}
	m.children[pid.GetId()] = c
	p.child = c
	m.log.Info("started plugin instance", "type", info.GetType(), "name", info.GetName(),
		"alloc", info.GetAllocId(), "why", why)
}

// currentOf returns the plugin c serves while c is its current instance.
func (m *Instances) currentOf(c *child) *managed {
	if c == nil {
		return nil
	}
	if p := m.plugins[keyOf(c.plugin)]; p != nil && p.child == c {
		return p
	}
	return nil
}

func (m *Instances) onChildSupervised(ctx actor.Context, ev *messages.ChildSupervised) {
	c := m.children[ev.GetChild().GetId()]
	p := m.currentOf(c)
	if p == nil {
		return // about an instance that is no longer current
	}
	log := m.log.With("type", c.plugin.GetType(), "name", c.plugin.GetName(), "alloc", c.plugin.GetAllocId(),
		"reason", ev.GetReason(), "failures", ev.GetFailures())
	switch ev.GetDecision() {
	case messages.SupervisionDecision_SUPERVISION_DECISION_BACKING_OFF:
		log.Warn("plugin instance failed: restarting it after a backoff", "delay", ev.GetDelay().AsDuration())
		if m.cfg.Metrics != nil {
			m.cfg.Metrics.InstanceRestarting(c.plugin)
		}
	case messages.SupervisionDecision_SUPERVISION_DECISION_RESTARTED:
		log.Info("plugin instance restarted")
	case messages.SupervisionDecision_SUPERVISION_DECISION_GAVE_UP, messages.SupervisionDecision_SUPERVISION_DECISION_STOPPED:
		if m.cfg.Metrics != nil {
			m.cfg.Metrics.InstanceGaveUp(c.plugin)
		}
		c.restarts = max(ev.GetFailures(), 1) - 1
		reason := ev.GetReason()
		if c.restarts > 0 {
			reason = fmt.Sprintf("%s (gave up after %d restarts)", reason, c.restarts)
		}
		m.fail(ctx, p, c, reason)
	default:
		log.Error("plugin instance failure escalated")
	}
}

// fail marks p failed, not to be restarted until the registry says
// something new about it, and tells the Type.
func (m *Instances) fail(ctx actor.Context, p *managed, c *child, reason string) {
	p.failed = true
	m.log.Error("plugin instance failed: not restarting it until the registry says something new about it",
		"type", p.info.GetType(), "name", p.info.GetName(), "alloc", p.info.GetAllocId(), "reason", reason)
	var pid *actor.PID
	if c != nil {
		pid = c.pid
	}
	m.typ.InstanceFailed(ctx, p.info, pid, reason)
}

func (m *Instances) onTerminated(ctx actor.Context, msg *actor.Terminated) bool {
	if _, ok := m.children[msg.GetWho().GetId()]; !ok {
		return false
	}
	ctx.Send(ctx.Self(), &instanceGone{pid: msg.GetWho()})
	return true
}

func (m *Instances) onInstanceGone(ctx actor.Context, msg *instanceGone) {
	c := m.children[msg.pid.GetId()]
	if c == nil {
		return
	}
	if p := m.currentOf(c); p != nil {
		if !p.failed && !m.stopping {
			m.fail(ctx, p, c, "plugin instance stopped unexpectedly")
		}
		p.child = nil
	}
	delete(m.children, msg.pid.GetId())
	m.typ.InstanceGone(ctx, c.plugin, c.pid)
}

func (m *Instances) scheduleResync(ctx actor.Context) {
	m.stopTimer()
	root, self := ctx.ActorSystem().Root, ctx.Self()
	m.resync = time.AfterFunc(m.cfg.ResyncInterval, func() { root.Send(self, &Resync{}) })
}

func (m *Instances) stopTimer() {
	if m.resync != nil {
		m.resync.Stop()
		m.resync = nil
	}
}
