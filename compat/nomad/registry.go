package nomad

import (
	"context"
	"errors"
	"maps"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/client/dynamicplugins"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
)

// Config configures New. Every field is optional.
type Config struct {
	// State is the embedder's store (Nomad's client state DB): every change
	// is written to it, whole, before the call that made it returns, and
	// the registry starts from what it holds. Nil keeps the state in
	// memory only, as NewRegistry(nil, ...) does in Nomad's tests.
	State dynamicplugins.StateStorage
	// Bucket, if set, keeps the state in a plugvisor store instead of State:
	// a bucket of a storage.Bolt file, one record per allocation, each
	// change an fsync'd transaction. The caller opens and closes the file.
	Bucket storage.Bucket
	// Dispensers gives DispensePlugin a dispenser per plugin type. New
	// keeps a copy: StubDispenserForType changes them later.
	Dispensers map[string]dynamicplugins.PluginDispenser
	// Logger receives the registry's log lines (a state it cannot read,
	// allocations it skips, subscriptions it refuses); nil is
	// hclog.Default(), the process's default logger. Give
	// hclog.NewNullLogger() to discard them.
	Logger hclog.Logger
	// Backlog is how many events a PluginsUpdatedCh reader may fall behind
	// before it is subscribed again; zero or less is
	// registry.DefaultMaxBacklog.
	Backlog int
}

// Registry is Nomad v1.11.3's dynamicplugins.Registry on plugvisor's
// registry. Its methods are safe for concurrent use, StubDispenserForType
// included. Errors Nomad's registry also returns have Nomad's text.
type Registry struct {
	reg     *registry.Registry
	log     hclog.Logger
	backlog int
	stop    sync.Once
	system  *actor.ActorSystem

	mu         sync.RWMutex
	dispensers map[string]dynamicplugins.PluginDispenser
	stubs      map[string]dynamicplugins.PluginDispenser
	types      map[string]bool // every type registered since the start, as Nomad's registry remembers them
}

var _ dynamicplugins.Registry = (*Registry)(nil)

// NewRegistry is Nomad's constructor: it never fails, and restores the
// state from state (nil for none). It logs through hclog.Default() unless
// an option says otherwise: pass WithLogger(c.logger) to log through the
// Nomad client's logger.
func NewRegistry(state dynamicplugins.StateStorage, dispensers map[string]dynamicplugins.PluginDispenser, opts ...Option) *Registry {
	cfg := Config{State: state, Dispensers: dispensers}
	for _, o := range opts {
		o(&cfg)
	}
	return New(cfg)
}

// Option sets a Config field for NewRegistry.
type Option func(*Config)

// WithLogger makes the registry log through l (Config.Logger).
func WithLogger(l hclog.Logger) Option { return func(c *Config) { c.Logger = l } }

// New starts a registry in an actor system of its own, restored from
// cfg.Bucket or cfg.State. It never fails: as Nomad's registry does, it
// starts empty when the stored state cannot be read, and logs why.
func New(cfg Config) *Registry {
	log := cfg.Logger
	if log == nil {
		log = hclog.Default()
	}
	log = log.Named("nomad_compat")
	bucket := cfg.Bucket
	if bucket == nil {
		state := cfg.State
		if state == nil {
			state = &memoryState{}
		}
		bucket = &stateBucket{state: state, log: log}
	}
	system := actors.NewSystem(log)
	rcfg := registry.Config{Bucket: bucket, Logger: log, DeregisterMissingIsNil: true}
	reg, err := registry.New(system, rcfg)
	if err != nil {
		// A plugvisor file whose records do not decode: start empty, as
		// Nomad does with a state it cannot read, on a store of its own.
		log.Error("cannot restore the registry; starting empty, in memory only", "error", err)
		rcfg.Bucket = &stateBucket{state: &memoryState{}, log: log}
		reg = mustStartEmpty(system, rcfg)
	}
	r := &Registry{
		reg: reg, log: log, system: system, backlog: cfg.Backlog,
		dispensers: maps.Clone(cfg.Dispensers), types: map[string]bool{},
	}
	for _, ptype := range reg.Snapshot().Types() {
		r.types[decodeID(ptype)] = true
	}
	return r
}

// mustStartEmpty starts a registry on an empty bucket in a system where
// none runs yet. registry.New fails only to restore a record or to spawn
// its actor under a name taken, and neither can happen here.
func mustStartEmpty(system *actor.ActorSystem, cfg registry.Config) *registry.Registry {
	reg, err := registry.New(system, cfg)
	if err != nil {
		panic("nomad compat: an empty registry did not start: " + err.Error())
	}
	return reg
}

// Plugvisor returns the plugvisor registry under the adapter, for what
// Nomad's interface lacks: snapshots, sequence numbers, actor subscribers.
// Its IDs are the adapter's: a value plugvisor would refuse is escaped.
func (r *Registry) Plugvisor() *registry.Registry { return r.reg }

// StubDispenserForType replaces the dispenser of ptype (nil removes the
// stub), as Nomad's does; unlike Nomad's, it is safe while the registry runs.
// As in Nomad, a stub is used only for a type that has a dispenser.
func (r *Registry) StubDispenserForType(ptype string, dispenser dynamicplugins.PluginDispenser) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if dispenser == nil {
		delete(r.stubs, ptype)
		return
	}
	if r.stubs == nil {
		r.stubs = map[string]dynamicplugins.PluginDispenser{}
	}
	r.stubs[ptype] = dispenser
}

// RegisterPlugin adds an allocation, or updates a known one (Nomad ignores
// the update). It returns once the change is stored. The registry keeps a
// copy of info.
func (r *Registry) RegisterPlugin(info *dynamicplugins.PluginInfo) error {
	switch {
	case info == nil:
		return refuse(ErrInvalid, "Plugin must not be nil")
	case info.Type == "":
		return refuse(ErrInvalid, "Plugin.Type must not be empty")
	case info.ConnectionInfo == nil:
		return refuse(ErrInvalid, "Plugin.ConnectionInfo must not be nil")
	case info.Name == "":
		return refuse(ErrInvalid, "Plugin.Name must not be empty")
	}
	p, err := toPlugvisor(info)
	if err != nil {
		return err
	}
	if err := r.reg.RegisterPlugin(p); err != nil {
		return err
	}
	r.mu.Lock()
	r.types[info.Type] = true
	r.mu.Unlock()
	return nil
}

// DeregisterPlugin removes one allocation. An allocation that is not
// registered is nil, and no event, as in Nomad (whose registry then sends
// an event for another allocation).
func (r *Registry) DeregisterPlugin(ptype, name, allocID string) error {
	switch {
	case ptype == "":
		return refuse(ErrInvalid, "must specify plugin type to deregister")
	case name == "":
		return refuse(ErrInvalid, "must specify plugin name to deregister")
	case allocID == "":
		return refuse(ErrInvalid, "must specify plugin allocation ID to deregister")
	case !r.known(ptype):
		return refuse(ErrNoPluginsForType, "no plugins registered for type: %s", ptype)
	}
	t, _ := encodeID(ptype) // a known type was encoded once
	n, okName := encodeID(name)
	a, okAlloc := encodeID(allocID)
	if !okName || !okAlloc {
		return nil // too long to have been registered
	}
	return r.reg.DeregisterPlugin(t, n, a)
}

func (r *Registry) known(ptype string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.types[ptype]
}

// ListPlugins returns the current allocation of each plugin of ptype, sorted
// by name; "" lists every type's (Nomad's lists none).
func (r *Registry) ListPlugins(ptype string) []*dynamicplugins.PluginInfo {
	t := ""
	if ptype != "" {
		var ok bool
		if t, ok = encodeID(ptype); !ok {
			return nil
		}
	}
	current := r.reg.ListPlugins(t)
	if len(current) == 0 {
		return nil
	}
	out := make([]*dynamicplugins.PluginInfo, len(current))
	for i, p := range current {
		out[i] = toNomad(p)
	}
	return out
}

// current returns the current allocation of (ptype, name) in Nomad's form.
func (r *Registry) current(ptype, name string) (*dynamicplugins.PluginInfo, bool) {
	t, okType := encodeID(ptype)
	n, okName := encodeID(name)
	if !okType || !okName {
		return nil, false
	}
	p, ok := r.reg.Snapshot().Current(t, n)
	return toNomad(p), ok
}

// WaitForPlugin returns the current allocation of (ptype, name) once there
// is one. It does not poll, as Nomad's does: it wakes on each change. It
// returns ctx's error unwrapped, as Nomad's does, and registry.ErrShutdown
// once the registry shuts down (Nomad's waits for ctx).
func (r *Registry) WaitForPlugin(ctx context.Context, ptype, name string) (*dynamicplugins.PluginInfo, error) {
	t, okType := encodeID(ptype)
	n, okName := encodeID(name)
	if !okType || !okName { // too long to be registered, ever
		<-ctx.Done()
		return nil, ctx.Err()
	}
	p, err := r.reg.WaitForPlugin(ctx, t, n)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return toNomad(p), nil
}

// DispensePlugin hands the current allocation of (ptype, name) to ptype's
// dispenser, or its stub.
func (r *Registry) DispensePlugin(ptype, name string) (any, error) {
	switch {
	case ptype == "":
		return nil, refuse(ErrInvalid, "must specify plugin type to dispense")
	case name == "":
		return nil, refuse(ErrInvalid, "must specify plugin name to dispense")
	}
	r.mu.RLock()
	dispense, ok := r.dispensers[ptype]
	if stub, stubbed := r.stubs[ptype]; ok && stubbed {
		dispense = stub
	}
	known := r.types[ptype]
	r.mu.RUnlock()
	switch {
	case !ok:
		return nil, refuse(ErrNoDispenser, "no plugin dispenser found for type: %s", ptype)
	case !known:
		return nil, refuse(ErrNoPluginsForType, "no plugins registered for type: %s", ptype)
	}
	p, ok := r.current(ptype, name)
	if !ok {
		return nil, refuse(ErrPluginNotFound, "plugin %s for type %s not found", name, ptype)
	}
	return dispense(p)
}

// PluginForAlloc returns allocation allocID of (ptype, name).
func (r *Registry) PluginForAlloc(ptype, name, allocID string) (*dynamicplugins.PluginInfo, error) {
	if !r.known(ptype) {
		return nil, refuse(ErrNoPluginsForType, "no plugins registered for type: %s", ptype)
	}
	t, _ := encodeID(ptype)
	n, okName := encodeID(name)
	a, okAlloc := encodeID(allocID)
	if okName && okAlloc {
		if p, ok := r.reg.Snapshot().ForAlloc(t, n, a); ok {
			return toNomad(p), nil
		}
	}
	return nil, refuse(ErrAllocNotFound, "no plugin for that allocation")
}

// Shutdown finishes the writes in flight, closes every PluginsUpdatedCh
// channel and stops the actor system. Afterwards writes fail with
// registry.ErrShutdown (Nomad's block forever) and reads answer from the
// last state. A second call does nothing. It does not close Config.Bucket's
// file.
func (r *Registry) Shutdown() {
	r.stop.Do(func() {
		if err := r.reg.Shutdown(); err != nil && !errors.Is(err, registry.ErrShutdown) {
			r.log.Error("registry shutdown", "error", err)
		}
		r.system.Shutdown()
	})
}
