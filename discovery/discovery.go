package discovery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/actors/plugintype"
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
	ErrDoesNotImplement = errors.New("discovery: does not implement")
	// ErrInvalidConfig: Start was given a config it cannot use.
	ErrInvalidConfig = errors.New("discovery: invalid config")
	// ErrShutdown: the Discovery is shut down.
	ErrShutdown = errors.New("discovery: shut down")
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
	if giveUp := c.Supervision.WithDefaults().OnGiveUp; giveUp != supervisor.Stop {
		problems = append(problems, fmt.Errorf("Supervision.OnGiveUp is %v, must be stop", giveUp))
	}
	problems = append(problems, c.Retry.Validate(), c.Supervision.Validate())
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
		return nil, fmt.Errorf("discovery: start actor %q: %w", cfg.Name, err)
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
		return "", fmt.Errorf("discovery: %w", err)
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
		return errors.New("discovery: Handle needs a function")
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
			return nil, fmt.Errorf("discovery: looking up plugin %q: %w", name, ctx.Err())
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
		return fmt.Errorf("discovery: shut down: %w", err)
	}
	return nil
}

// handler is the actor behind one Handle: a registry subscriber that runs
// fn for each allocation of its type, once.
type handler struct {
	ptype    string
	registry *actor.PID
	fn       func(name string, plugin *messages.PluginInfo)
	log      hclog.Logger
	seen     map[regKey]bool
}

// Receive handles the registry's replay and events.
func (h *handler) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		h.seen = map[regKey]bool{}
		ctx.Send(h.registry, &messages.Subscribe{Type: h.ptype, Subscriber: ctx.Self(), Replay: true})
	case *messages.Subscribed:
		for _, p := range msg.GetCurrent() {
			h.run(p)
		}
	case *messages.PluginRegistered:
		h.run(msg.GetPlugin())
	}
}

func (h *handler) run(p *messages.PluginInfo) {
	if h.seen[regKeyOf(p)] {
		return
	}
	h.seen[regKeyOf(p)] = true
	defer func() {
		if r := recover(); r != nil {
			h.log.Error("plugin handler panicked", "plugin", p.GetName(), "alloc", p.GetAllocId(), "reason", fmt.Sprint(r))
		}
	}()
	h.fn(p.GetName(), p)
}

// fileID tells a file from the one that was at the same path before: a
// socket recreated by a restarted plugin, a spec file rewritten.
type fileID struct {
	dev, ino    uint64
	mtime, size int64
}

func identify(path string) fileID {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}
	}
	id := fileID{mtime: fi.ModTime().UnixNano(), size: fi.Size()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino = uint64(st.Dev), st.Ino
	}
	return id
}

// sameCandidate reports whether a and b describe the same plugin file and address.
func sameCandidate(a, b Candidate) bool {
	ta, tb := a.TLS, b.TLS
	a.TLS, b.TLS = nil, nil
	return a == b && (ta == nil) == (tb == nil) && (ta == nil || *ta == *tb)
}

// found is the discovery actor's record of one plugin on disk.
type found struct {
	candidate Candidate
	file      fileID
	activator *actor.PID // nil while the plugin's file is bad
	status    *messages.DiscoveredPlugin
	missing   time.Time // when its file was first missed; zero while it is there
}

// The discovery actor's messages to itself.
type (
	// activateNow is sent by Discovery.Get when it finds no registration
	// of the plugin it asks for.
	activateNow struct{ name string }
	// graceOver is sent by the grace timer: missing files are looked for again.
	graceOver struct{}
)

// scanRun is one scan of the directories, on a goroutine of its own.
type scanRun struct{ done chan struct{} }

// scanned is sent by a scan's goroutine to the discovery actor.
type scanned struct {
	run        *scanRun
	candidates []Candidate
	files      map[string]fileID
	errs       []error
}

// discoveryActor owns what is known of the plugins on disk: one record per
// plugin name, with the activator that keeps its registrations. Watchers
// tell it when a directory changed; it then scans every directory (off its
// goroutine, one scan at a time, changes meanwhile coalesced into one more
// scan) and makes the activators match: a new plugin gets an activator, a
// changed one is activated again, one whose file is gone or turned bad is
// forgotten (its registrations withdrawn). After each scan it also removes
// any registration discovery made for a file it no longer has.
//
// Event contract for SubscribeDiscovery subscribers: a
// DiscoveredPluginChanged for each change of a plugin's state, in the order
// the actor learned them; nothing is lost while the subscriber lives; a
// slow subscriber delays nobody; one that terminates is dropped.
type discoveryActor struct {
	cfg         Config
	log         hclog.Logger
	published   *atomic.Pointer[[]*messages.DiscoveredPlugin]
	plugins     map[string]*found // by plugin name
	subscribers *plugintype.Subscribers
	scan        *scanRun // in flight, or nil
	again       bool     // a change arrived during the scan in flight
	dirProblems map[string]bool
	graceTimer  supervisor.Stopper // armed while a plugin's file is missing
}

// newDiscoveryActor makes an incarnation of the discovery actor. The
// subscribers and the published list are the facade's and outlive a
// restart after a panic; what is known of the plugins on disk does not:
// the new incarnation's watchers scan again.
func newDiscoveryActor(cfg Config, published *atomic.Pointer[[]*messages.DiscoveredPlugin], subscribers *plugintype.Subscribers) *discoveryActor {
	return &discoveryActor{cfg: cfg, log: cfg.Logger, published: published, plugins: map[string]*found{},
		subscribers: subscribers, dirProblems: map[string]bool{}}
}

// Receive handles the watchers' news, scans, activators' reports,
// supervision events and subscriptions.
func (a *discoveryActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		a.onStarted(ctx)
	case *messages.DiscoveryDirectoryChanged:
		a.onDirectoryChanged(ctx)
	case *scanned:
		a.onScanned(ctx, msg)
	case *messages.DiscoveryActivatorReport:
		a.onReport(ctx, msg)
	case *messages.ChildSupervised:
		a.onChildSupervised(msg)
	case *actor.Terminated:
		a.onTerminated(ctx, msg)
	case *messages.SubscribeDiscovery:
		a.onSubscribe(ctx, msg)
	case *activateNow:
		a.onActivateNow(ctx, msg)
	case *graceOver:
		a.graceTimer = nil
		a.onDirectoryChanged(ctx)
	case *actor.Stopping, *actor.Restarting:
		a.release()
	}
}

func (a *discoveryActor) onStarted(ctx actor.Context) {
	dirs := slices.Compact(slices.Sorted(slices.Values(slices.Concat(a.cfg.Dirs.Sockets, a.cfg.Dirs.Specs))))
	for _, dir := range dirs {
		ctx.SpawnPrefix(newWatcherProps(watcherConfig{dir: dir, reportTo: ctx.Self(), rescan: a.cfg.RescanInterval,
			log: a.log.Named("watcher")}), "watcher")
	}
	a.log.Info("discovery started", "socket_dirs", a.cfg.Dirs.Sockets, "spec_dirs", a.cfg.Dirs.Specs,
		"rescan_interval", a.cfg.RescanInterval)
}

func (a *discoveryActor) onDirectoryChanged(ctx actor.Context) {
	if a.scan != nil {
		a.again = true
		return
	}
	run := &scanRun{done: make(chan struct{})}
	a.scan, a.again = run, false
	root, self, dirs := ctx.ActorSystem().Root, ctx.Self(), a.cfg.Dirs
	go func() {
		defer close(run.done)
		candidates, errs := Scan(dirs)
		files := make(map[string]fileID, len(candidates))
		for _, c := range candidates {
			files[c.Name] = identify(c.Source)
		}
		root.Send(self, &scanned{run: run, candidates: candidates, files: files, errs: errs})
	}()
}

func (a *discoveryActor) onScanned(ctx actor.Context, msg *scanned) {
	if msg.run != a.scan {
		return
	}
	a.scan = nil
	present := map[string]bool{}
	for _, c := range msg.candidates {
		present[c.Name] = true
	}
	bad := map[string]*PluginError{}
	for _, err := range msg.errs {
		pe := (*PluginError)(nil)
		switch {
		case errors.As(err, &pe) && errors.Is(pe, ErrNotFound):
			// Listed, then gone before it was looked at (a socket being
			// recreated): missing, with its grace period, not bad.
		case pe != nil && pe.Name != "":
			bad[pe.Name] = pe
		case !a.dirProblems[err.Error()]:
			a.dirProblems[err.Error()] = true
			a.log.Warn("cannot read a plugin directory", "error", err)
		}
	}
	a.missing(ctx, present, bad)
	for name, pe := range bad {
		a.invalid(ctx, name, pe)
	}
	for _, c := range msg.candidates {
		a.found(ctx, c, msg.files[c.Name])
	}
	a.cleanup(ctx)
	if a.again {
		a.onDirectoryChanged(ctx)
	}
}

// found makes sure the plugin of candidate c has an activator, and that
// the activator knows about a change of its file.
func (a *discoveryActor) found(ctx actor.Context, c Candidate, file fileID) {
	f := a.plugins[c.Name]
	switch {
	case f == nil || f.activator == nil:
		f = &found{candidate: c, file: file, status: &messages.DiscoveredPlugin{Name: c.Name}}
		a.plugins[c.Name] = f
		f.activator = ctx.SpawnPrefix(newActivatorProps(activatorConfig{
			candidate: c, registry: a.cfg.Registry, reportTo: ctx.Self(),
			activateTimeout: a.cfg.ActivateTimeout, csiTimeout: a.cfg.CSITimeout,
			retry: a.cfg.Retry, slowRetry: a.cfg.SlowRetry, clock: a.cfg.Clock, metrics: a.cfg.Metrics,
			log: a.log.Named("activator"),
		}), "activator")
		a.log.Debug("plugin found", "plugin", c.Name, "file", c.Source, "address", c.Addr)
	case !sameCandidate(f.candidate, c) || f.file != file:
		f.candidate, f.file = c, file
		ctx.Send(f.activator, &messages.ReactivateDiscoveredPlugin{Kind: string(c.Kind), Source: c.Source, Connection: c.ConnectionInfo()})
	}
}

// invalid records that the plugin's file is bad, forgetting its activator.
// It logs the problem once, not at every rescan.
func (a *discoveryActor) invalid(ctx actor.Context, name string, pe *PluginError) {
	f := a.plugins[name]
	if f == nil {
		f = &found{status: &messages.DiscoveredPlugin{Name: name}}
		a.plugins[name] = f
	}
	a.forget(ctx, f, "its file is bad")
	if f.status.GetState() == messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_INVALID && f.status.GetError() == pe.Error() {
		return
	}
	a.log.Error("plugin is invalid: ignoring it until its file changes", "plugin", name, "file", pe.Path, "error", pe)
	f.status = &messages.DiscoveredPlugin{Name: name, Source: pe.Path, Error: pe.Error(),
		State: messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_INVALID}
	a.changed(ctx, f.status)
}

// missing handles the plugins whose file the scan did not find. One with
// an activator keeps it, and its registrations, for the grace period: a
// socket recreated meanwhile is the same plugin. Past the grace period, or
// at once for a plugin with nothing to keep, the plugin is gone.
func (a *discoveryActor) missing(ctx actor.Context, present map[string]bool, bad map[string]*PluginError) {
	now := a.cfg.Clock.Now()
	var next time.Duration
	for name, f := range a.plugins {
		if present[name] || bad[name] != nil {
			f.missing = time.Time{}
			continue
		}
		if f.activator != nil && f.missing.IsZero() {
			f.missing = now
			a.log.Debug("plugin file is missing: waiting for it to come back", "plugin", name, "grace", a.cfg.Grace)
		}
		left := a.cfg.Grace - now.Sub(f.missing)
		if f.activator == nil || left <= 0 {
			a.gone(ctx, name, f)
			continue
		}
		if next == 0 || left < next {
			next = left
		}
	}
	if next > 0 && a.graceTimer == nil {
		root, self := ctx.ActorSystem().Root, ctx.Self()
		a.graceTimer = a.cfg.Clock.AfterFunc(next, func() { root.Send(self, &graceOver{}) })
	}
}

// onActivateNow passes a caller's interest in a plugin to its activator,
// and looks at the directories again for a plugin not found yet.
func (a *discoveryActor) onActivateNow(ctx actor.Context, msg *activateNow) {
	if f := a.plugins[msg.name]; f != nil && f.activator != nil {
		ctx.Send(f.activator, &retryNow{})
		return
	}
	a.onDirectoryChanged(ctx)
}

func (a *discoveryActor) gone(ctx actor.Context, name string, f *found) {
	a.log.Info("plugin is gone", "plugin", name, "file", f.status.GetSource())
	a.forget(ctx, f, "its file is gone")
	delete(a.plugins, name)
	status := proto.CloneOf(f.status)
	status.State, status.Registered = messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_GONE, nil
	a.changed(ctx, status)
}

func (a *discoveryActor) forget(ctx actor.Context, f *found, why string) {
	if f.activator != nil {
		ctx.Send(f.activator, &messages.ForgetDiscoveredPlugin{Reason: why})
		f.activator = nil
		f.candidate, f.file = Candidate{}, fileID{}
	}
}

// cleanup withdraws every registration discovery made for a file that no
// plugin with an activator comes from: left over by a plugin that vanished
// while the agent was down, or by an activator that stopped mid-way.
func (a *discoveryActor) cleanup(ctx actor.Context) {
	sources := map[string]bool{}
	for _, f := range a.plugins {
		if f.activator != nil {
			sources[f.candidate.Source] = true
		}
	}
	for _, p := range discovered(a.cfg.Registry.Snapshot()) {
		if !sources[p.GetOptions()[OptionSource]] {
			a.log.Info("removing a registration whose plugin file is gone", "type", p.GetType(), "name", p.GetName(),
				"alloc", p.GetAllocId(), "file", p.GetOptions()[OptionSource])
			ctx.Send(a.cfg.Registry.PID(), &messages.DeregisterPlugin{Type: p.GetType(), Name: p.GetName(), AllocId: p.GetAllocId()})
		}
	}
}

// activatorOf returns the record whose activator is pid.
func (a *discoveryActor) activatorOf(pid *actor.PID) *found {
	for _, f := range a.plugins {
		if f.activator != nil && f.activator.Equal(pid) {
			return f
		}
	}
	return nil
}

func (a *discoveryActor) onReport(ctx actor.Context, msg *messages.DiscoveryActivatorReport) {
	if f := a.activatorOf(msg.GetActivator()); f != nil {
		f.status = msg.GetPlugin()
		a.changed(ctx, f.status)
	}
}

func (a *discoveryActor) onChildSupervised(msg *messages.ChildSupervised) {
	level := hclog.Warn
	if msg.GetDecision() == messages.SupervisionDecision_SUPERVISION_DECISION_GAVE_UP {
		level = hclog.Error
	}
	a.log.Log(level, "discovery actor failed", "actor", msg.GetChild(), "decision", msg.GetDecision(),
		"failures", msg.GetFailures(), "reason", msg.GetReason())
}

// onTerminated drops a subscriber, or notes that an activator stopped by
// itself (it gave up under supervision): the next scan starts another.
func (a *discoveryActor) onTerminated(ctx actor.Context, msg *actor.Terminated) {
	if a.subscribers.Drop(msg.GetWho()) {
		return
	}
	if f := a.activatorOf(msg.GetWho()); f != nil {
		f.activator = nil
		status := proto.CloneOf(f.status)
		status.State, status.Error = messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_FAILED, "activator stopped unexpectedly"
		f.status = status
		a.changed(ctx, status)
	}
}

// changed publishes a plugin's new state to the subscribers and to Plugins.
func (a *discoveryActor) changed(ctx actor.Context, status *messages.DiscoveredPlugin) {
	a.subscribers.Publish(ctx, &messages.DiscoveredPluginChanged{Plugin: status})
	list := make([]*messages.DiscoveredPlugin, 0, len(a.plugins))
	for _, f := range a.plugins {
		list = append(list, f.status)
	}
	slices.SortFunc(list, func(x, y *messages.DiscoveredPlugin) int { return strings.Compare(x.GetName(), y.GetName()) })
	a.published.Store(&list)
}

func (a *discoveryActor) onSubscribe(ctx actor.Context, msg *messages.SubscribeDiscovery) {
	var replay []any
	if msg.GetReplay() {
		for _, p := range *a.published.Load() {
			replay = append(replay, &messages.DiscoveredPluginChanged{Plugin: p})
		}
	}
	a.subscribers.Subscribe(ctx, msg.GetSubscriber(), replay...)
}

// release stops the grace timer and waits for the scan in flight, so that
// nothing outlives the actor.
func (a *discoveryActor) release() {
	if a.graceTimer != nil {
		a.graceTimer.Stop()
		a.graceTimer = nil
	}
	if a.scan != nil {
		<-a.scan.done
		a.scan = nil
	}
}

// cloneStatus returns a copy of s to hand to another actor.
func cloneStatus(s *messages.DiscoveredPlugin) *messages.DiscoveredPlugin { return proto.CloneOf(s) }
