package discovery

import (
	"errors"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/actors/plugintype"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/supervisor"
)

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
	stopping    bool               // Stopping or Restarting arrived: its children are stopping
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
		a.onStopping()
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
	if a.stopping {
		return // a scan now would outlive the actor, and start activators nobody stops
	}
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
	a.log.Warn("plugin is invalid: ignoring it until its file changes", "plugin", name, "file", pe.Path, "error", pe)
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
// While the actor stops, its activators stop with it: nothing to note.
func (a *discoveryActor) onTerminated(ctx actor.Context, msg *actor.Terminated) {
	if a.subscribers.Drop(msg.GetWho()) || a.stopping {
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

// onStopping marks the actor as stopping, for the messages it still
// handles while its children stop (protoactor delivers them until the last
// child is gone), and releases what it holds.
func (a *discoveryActor) onStopping() {
	a.stopping = true
	a.release()
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
