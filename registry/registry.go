package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry/internal/table"
	"github.com/plugvisor/plugvisor/storage"
)

// Dispenser turns the current allocation of a plugin into whatever a caller
// of DispensePlugin uses to talk to it (a client, say).
type Dispenser func(info *messages.PluginInfo) (any, error)

// Config configures a registry. Bucket or Memory is required, not both.
type Config struct {
	// Bucket is where allocations are kept durable: a bucket of a
	// storage.Bolt file in the agent, of a storage.Memory in tests.
	Bucket storage.Bucket
	// Memory keeps the allocations in memory only, as Go values, instead
	// of a Bucket: see MemoryStore.
	Memory *MemoryStore
	// Dispensers gives DispensePlugin a dispenser per plugin type.
	Dispensers map[string]Dispenser
	// Logger receives the registry's log lines; nil discards them.
	Logger hclog.Logger
	// Metrics receives the registry's measurements; nil discards them.
	Metrics Metrics
	// RequestTimeout bounds how long a facade call waits for the actor's
	// answer (default 30s). A healthy registry answers in microseconds, or
	// once its write is durable. A write (RegisterPlugin,
	// DeregisterPlugin) gives up between RequestTimeout and one and a half
	// times it: one timer, ticking every half timeout while calls wait,
	// ends them all (see inbox.tick).
	RequestTimeout time.Duration
	// Name is the registry actor's name in the actor system
	// (default "registry").
	Name string
	// DeregisterMissingIsNil makes deregistering an allocation that is not
	// registered succeed with nil, as Nomad's registry does. By default it
	// returns ErrNotFound. Either way nothing changes and no event is sent.
	DeregisterMissingIsNil bool
	// Limits bound what the registry holds (defaults: see Limits).
	Limits Limits
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	c.Logger = c.Logger.Named("registry")
	if c.Metrics == nil {
		c.Metrics = noMetrics{}
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 30 * time.Second
	}
	if c.Name == "" {
		c.Name = "registry"
	}
	c.Limits = c.Limits.withDefaults()
	return c
}

// Registry is the Go facade over the registry actor, for callers that are
// not actors. Its methods are Nomad's dynamicplugins.Registry methods, and
// are safe for concurrent use. Reads (ListPlugins, DispensePlugin,
// PluginForAlloc, WaitForPlugin, Snapshot) never go through the actor: they
// read the latest published snapshot. Writes go to the actor and return once
// durable. Actors talk to the registry directly at PID.
type Registry struct {
	system     *actor.ActorSystem
	pid        *actor.PID
	snapshot   *atomic.Pointer[Snapshot]
	dispensers map[string]Dispenser
	timeout    time.Duration
	log        hclog.Logger
	channels   *slots // open channel subscriptions

	// in carries the facade's writes to the actor. Shutdown closes it: a
	// write put before is answered; one after gets ErrShutdown without
	// reaching the actor.
	in *inbox
	// encode: the store takes records, so callers encode theirs.
	encode bool

	// mu orders subscriptions against Shutdown.
	mu     sync.RWMutex
	closed bool
	done   chan struct{}

	// owned stops what Open started for the registry (nil after New);
	// Close calls it once.
	owned      func() error
	closeOwned sync.Once
}

// New restores the registry's state from cfg.Bucket and starts its actor in
// system. Restoring emits no events. A record that cannot be decoded is an
// error: the registry never starts silently empty.
func New(system *actor.ActorSystem, cfg Config) (*Registry, error) {
	if (cfg.Bucket == nil) == (cfg.Memory == nil) {
		return nil, fmt.Errorf("%w: config needs a storage bucket or a memory store (Config.Bucket or Config.Memory), one of them", ErrInvalid)
	}
	cfg = cfg.withDefaults()
	tables, seq, err := restore(cfg)
	if err != nil {
		return nil, err
	}
	published := &atomic.Pointer[Snapshot]{}
	published.Store(newSnapshot(tables.Freeze(), seq))
	dispatcher := newOwnGoroutine()
	var writer *storeWriter // none with memory: the actor commits itself
	if cfg.Memory == nil {
		writer = newStoreWriter(cfg.Bucket)
	}
	// The subscribers are kept apart from the actor instance so that a
	// restart after a panic keeps them (the watches live in protoactor's
	// context and survive too).
	subs, in := newSubscribers(), newInbox(cfg.RequestTimeout)
	props := actor.PropsFromProducer(func() actor.Actor {
		a := newPluginsActor(cfg, published, writer, in, subs)
		a.stopped = func() { dispatcher.close(); writer.close() }
		return a
	}, actor.WithDispatcher(dispatcher))
	pid, err := system.Root.SpawnNamed(props, cfg.Name)
	if err != nil {
		dispatcher.close()
		writer.close()
		return nil, fmt.Errorf("start actor %q: %w", cfg.Name, err)
	}
	restored := len(published.Load().List(""))
	cfg.Logger.Info("registry started", "restored_plugins", restored, "last_sequence", seq)
	return &Registry{
		system:     system,
		pid:        pid,
		snapshot:   published,
		dispensers: cfg.Dispensers,
		timeout:    cfg.RequestTimeout,
		log:        cfg.Logger,
		in:         in,
		encode:     cfg.Memory == nil,
		channels:   &slots{max: int64(cfg.Limits.Subscribers)},
		done:       make(chan struct{}),
	}, nil
}

// restore reads the state cfg's store holds.
func restore(cfg Config) (*table.Working, uint64, error) {
	if cfg.Memory != nil {
		tables, seq := cfg.Memory.restore()
		return tables, seq, nil
	}
	return load(cfg.Bucket)
}

// PID is the registry actor's address, for actors that send it commands
// and subscriptions directly.
func (r *Registry) PID() *actor.PID { return r.pid }

// Snapshot returns the latest durable state. It never blocks.
func (r *Registry) Snapshot() *Snapshot { return r.snapshot.Load() }

// RegisterPlugin adds an allocation of a plugin, or updates a known one in
// place. It returns once the change is durable and readers see it. Its
// event goes to the subscribers in the same step of the registry actor,
// always before any later write is applied: before the answer while
// writes come one at a time, right after it while callers write
// concurrently (one of the registry's last 16 batches held more than one
// write, anyone's), so a caller may return before a subscriber has the
// event. The registry keeps a copy of info, strings included, and no
// reference to info or to anything in it: the caller may change or reuse
// info afterwards, and a PluginInfo built for a direct call (not through
// an interface) does not escape to the heap. A registration larger than
// any valid one (more options than MaxOptions, or more bytes of strings
// than the limits add up to) is refused before anything is copied.
//
// A new allocation becomes current whether or not anything serves its
// socket, and whatever the health of the one it replaces: RegisterPlugin
// does not check, and leaves that to its callers. The API refuses to
// replace a healthy current allocation without "force" (api.PluginBody);
// an embedder that registers on behalf of others should check likewise,
// and may record who asked in info.RegisteredBy.
//
// The caller validates and encodes the copy itself, off the registry
// actor, then hands it over with the writes of the other callers of the
// moment (see inbox).
func (r *Registry) RegisterPlugin(info *messages.PluginInfo) error {
	if err := checkCopySize(info); err != nil {
		return err
	}
	w := newCall()
	if w.held = table.Copy(info); w.held != nil {
		w.plugin = w.held.Info()
	}
	if err := w.check(r.encode); err != nil {
		return err
	}
	return r.submit(w)
}

// DeregisterPlugin removes one allocation of a plugin. Removing an
// allocation that is not registered changes nothing and emits nothing; it
// returns ErrNotFound, or nil with Config.DeregisterMissingIsNil. Its event
// goes out as RegisterPlugin's does.
func (r *Registry) DeregisterPlugin(ptype, name, allocID string) error {
	if err := validateDeregister(ptype, name, allocID); err != nil {
		return err
	}
	w := newCall()
	w.deregister, w.ptype, w.name, w.allocID, w.checked = true, ptype, name, allocID, true
	return r.submit(w)
}

// submit leaves w in the inbox, wakes the actor if no wake-up is on its
// way, and waits for the answer or the request timeout.
func (r *Registry) submit(w *write) error {
	accepted, wake := r.in.put(w)
	if !accepted {
		return errorf(ErrShutdown, "the write came after Shutdown")
	}
	if wake {
		r.system.Root.Send(r.pid, drainInbox{})
	}
	answered, err := w.wait()
	if !answered {
		// The sweep ends a call between one and one and a half
		// request timeouts after it was put (inbox.tick).
		return errorf(ErrTimeout, "no answer from the registry actor after %v to %v (Config.RequestTimeout to one and a half times it): %w", r.timeout, r.timeout*3/2, actor.ErrTimeout)
	}
	return err
}

func (r *Registry) futureError(err error) error {
	if errors.Is(err, actor.ErrDeadLetter) {
		return errorf(ErrShutdown, "its actor is gone")
	}
	if errors.Is(err, actor.ErrTimeout) {
		return errorf(ErrTimeout, "no answer from the registry actor: %w", err)
	}
	return fmt.Errorf("no answer from the registry actor: %w", err)
}

// ListPlugins returns the current allocation of every plugin of ptype,
// sorted by name. The values are shared: treat them as read-only.
func (r *Registry) ListPlugins(ptype string) []*messages.PluginInfo {
	return r.Snapshot().List(ptype)
}

// PluginForAlloc returns the allocation allocID of plugin (ptype, name).
func (r *Registry) PluginForAlloc(ptype, name, allocID string) (*messages.PluginInfo, error) {
	if p, ok := r.Snapshot().ForAlloc(ptype, name, allocID); ok {
		return p, nil
	}
	return nil, errorf(ErrNotFound, "plugin %q of type %q has no allocation %q", name, ptype, allocID)
}

// DispensePlugin hands the current allocation of plugin (ptype, name) to
// the dispenser configured for ptype and returns what it made.
func (r *Registry) DispensePlugin(ptype, name string) (any, error) {
	dispense, ok := r.dispensers[ptype]
	if ok {
		// A registered plugin's type and name were validated when it
		// registered: only a miss needs them checked, to say why.
		if p, ok := r.Snapshot().Current(ptype, name); ok {
			return dispense(p)
		}
	}
	if err := errors.Join(ValidateID("plugin type", ptype), ValidateID("plugin name", name)); err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrNoDispenser, ptype)
	}
	return nil, errorf(ErrNotFound, "plugin %q of type %q is not registered", name, ptype)
}

// WaitForPlugin returns the current allocation of plugin (ptype, name) as
// soon as there is one, or ctx's error, or ErrShutdown. It does not poll:
// it wakes when a new snapshot is published.
func (r *Registry) WaitForPlugin(ctx context.Context, ptype, name string) (*messages.PluginInfo, error) {
	for {
		s := r.Snapshot()
		if p, ok := s.Current(ptype, name); ok {
			return p, nil
		}
		select {
		case <-s.Changed():
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for plugin %q of type %q: %w", name, ptype, ctx.Err())
		case <-r.done:
			return nil, errorf(ErrShutdown, "waiting for plugin %q of type %q", name, ptype)
		}
	}
}

// Shutdown finishes the writes already accepted, then stops the registry
// actor. Afterwards writes return ErrShutdown at once, channels from
// PluginsUpdatedCh close, and reads keep answering from the last snapshot.
// A second call returns nil. It stops neither the actor system nor the
// store: Close of a registry from Open stops those too.
func (r *Registry) Shutdown() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.in.close()
	close(r.done)
	r.mu.Unlock()

	res, err := r.system.Root.RequestFuture(r.pid, &messages.ShutdownRegistry{}, r.timeout).Result()
	if err == nil {
		err = messages.ErrorFromProto(res.(*messages.ShutdownRegistryResponse).GetError())
	} else {
		err = r.futureError(err)
	}
	if stopErr := r.system.Root.PoisonFuture(r.pid).Wait(); err == nil && stopErr != nil {
		err = fmt.Errorf("stop actor: %w", stopErr)
	}
	r.log.Info("registry shut down")
	return err
}
