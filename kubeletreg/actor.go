package kubeletreg

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/plugvisor/plugvisor/discovery"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/supervisor"
)

// fileID tells a socket from the one that was at the same path before: a
// sidecar that restarted recreates its socket.
type fileID struct{ dev, ino uint64 }

// socketsIn lists the sockets in dir and its subdirectories, as kubelet
// does, skipping names that start with a dot.
func socketsIn(dir string, out map[string]fileID, depth int) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		switch {
		case strings.HasPrefix(e.Name(), "."):
		case e.IsDir() && depth == 0:
			socketsIn(path, out, depth+1)
		case e.Type()&os.ModeSocket != 0:
			if fi, err := os.Stat(path); err == nil {
				st, _ := fi.Sys().(*syscall.Stat_t)
				out[path] = fileID{uint64(st.Dev), st.Ino}
			}
		}
	}
}

// entry is the watcher's record of one registration socket.
type entry struct {
	socket  string
	file    fileID
	run     *run // in flight, or nil
	again   bool // the socket changed during the run: run again
	plan    plan // the latest probe's, while the name is claimed
	claimed bool // plan.name is held by this socket
	refused *refusal
	waits   string // the name another socket holds, after a conflict
	history []time.Time
	slow    bool
	timer   supervisor.Stopper
	due     *retryTimer
	status  *messages.DiscoveredPlugin
}

// run is one registration attempt in flight, on goroutines of its own:
// the probe, then the settle. probed closes when the probe's goroutine
// ended, done when the settle's did (or a scan's).
type run struct {
	socket   string
	work     context.Context
	cancel   context.CancelFunc
	probed   chan struct{}
	done     chan struct{}
	settling bool
}

func newRun(socket string) *run {
	work, cancel := context.WithCancel(context.Background())
	return &run{socket: socket, work: work, cancel: cancel, probed: make(chan struct{}), done: make(chan struct{})}
}

// wait cancels the run and waits for its goroutines: one still probing
// has nobody to settle it while the actor stops, so its probe's end is
// its end.
func (r *run) wait() {
	r.cancel()
	if r.settling {
		<-r.done
		return
	}
	<-r.probed
}

// retryTimer tells the timer in force from one stopped too late.
type retryTimer struct{ _ byte }

// The watcher's messages to itself.
type (
	// scanned is sent by a scan's goroutine with the sockets found.
	scanned struct {
		scan    *run
		sockets map[string]fileID
	}
	// probed is sent by a run's goroutine when GetInfo and the CSI
	// endpoint answered, or failed.
	probed struct {
		run     *run
		plan    plan
		refused *refusal
	}
	// settled is sent by a run's goroutine once the registrations were
	// made (or refused) and the socket was told.
	settled struct {
		run      *run
		plan     plan
		refused  *refusal
		notified error
	}
	// retryDue is sent by an entry's backoff timer.
	retryDue struct {
		socket string
		timer  *retryTimer
	}
)

// watcherActor owns what is known of the registration sockets: one entry
// per socket path, with the attempt in flight and its backoff. Directory
// watchers (discovery.WatcherProps) tell it when a directory changed; it
// then lists the sockets (off its goroutine) and makes the registrations
// match: a new or recreated socket is registered, a removed one
// deregistered. Each attempt runs on a goroutine in two steps: probe
// (GetInfo, kubelet's checks, the CSI endpoint's identity), then, once the
// actor checked that no other socket holds the name with another endpoint,
// settle (the registrations and NotifyRegistrationStatus).
//
// A restart after a panic keeps nothing but the published list: the new
// incarnation lists the sockets again, and the registry's snapshot tells
// what is registered already.
type watcherActor struct {
	cfg       Config
	log       hclog.Logger
	published *atomic.Pointer[[]*messages.DiscoveredPlugin]
	entries   map[string]*entry
	orphans   map[*run]bool // runs of sockets that went away, still going
	scan      *run
	rescan    bool
	stopping  bool
}

func newWatcherActor(cfg Config, published *atomic.Pointer[[]*messages.DiscoveredPlugin]) *watcherActor {
	return &watcherActor{cfg: cfg, log: cfg.Logger, published: published, entries: map[string]*entry{},
		orphans: map[*run]bool{}}
}

// Receive handles the directory watchers' news, scans, attempts, timers
// and supervision events.
func (a *watcherActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		a.onStarted(ctx)
	case *messages.DiscoveryDirectoryChanged:
		a.onDirectoryChanged(ctx)
	case *scanned:
		a.onScanned(ctx, msg)
	case *probed:
		a.onProbed(ctx, msg)
	case *settled:
		a.onSettled(ctx, msg)
	case *retryDue:
		a.onRetryDue(ctx, msg)
	case *messages.ChildSupervised:
		a.log.Warn("directory watcher failed", "actor", msg.GetChild(), "decision", msg.GetDecision(), "reason", msg.GetReason())
	case *actor.Stopping, *actor.Restarting:
		a.onStopping()
	}
}

func (a *watcherActor) onStarted(ctx actor.Context) {
	for _, dir := range a.cfg.Dirs {
		ctx.SpawnPrefix(discovery.WatcherProps(dir, ctx.Self(), a.cfg.RescanInterval, a.log.Named("watcher")), "watcher")
	}
	a.log.Info("watching kubelet registration directories", "dirs", a.cfg.Dirs)
}

func (a *watcherActor) onDirectoryChanged(ctx actor.Context) {
	if a.stopping {
		return
	}
	if a.scan != nil {
		a.rescan = true
		return
	}
	scan := newRun("")
	scan.settling = true
	a.scan, a.rescan = scan, false
	root, self, dirs := ctx.ActorSystem().Root, ctx.Self(), a.cfg.Dirs
	go func() {
		defer close(scan.done)
		sockets := map[string]fileID{}
		for _, dir := range dirs {
			socketsIn(dir, sockets, 0)
		}
		root.Send(self, &scanned{scan: scan, sockets: sockets})
	}()
}

func (a *watcherActor) onScanned(ctx actor.Context, msg *scanned) {
	if msg.scan != a.scan {
		return
	}
	a.scan = nil
	for socket, e := range a.entries {
		if _, ok := msg.sockets[socket]; !ok {
			a.gone(ctx, e)
		}
	}
	for socket, file := range msg.sockets {
		e := a.entries[socket]
		switch {
		case e == nil:
			e = &entry{socket: socket, file: file, status: &messages.DiscoveredPlugin{Name: filepath.Base(socket),
				Kind: KindRegistration, Source: socket, Protocol: discovery.ProtocolCSI}}
			a.entries[socket] = e
			a.log.Info("registration socket found", "socket", socket)
			a.start(ctx, e)
		case e.file != file:
			e.file = file
			a.log.Info("registration socket replaced: registering again", "socket", socket)
			e.history, e.slow = nil, false
			a.start(ctx, e)
		}
	}
	a.cleanup(ctx)
	if a.rescan {
		a.onDirectoryChanged(ctx)
	}
}

// start begins an attempt for e, or, when one is in flight, makes it run
// again once it is over.
func (a *watcherActor) start(ctx actor.Context, e *entry) {
	if e.run != nil {
		e.again = true
		return
	}
	a.stopTimer(e)
	r := newRun(e.socket)
	e.run, e.again, e.refused, e.waits = r, false, nil, ""
	e.status.State, e.status.NextAttemptTime = messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_ACTIVATING, nil
	a.changed()
	root, self, socket, timeout := ctx.ActorSystem().Root, ctx.Self(), e.socket, a.cfg.Timeout
	go func() {
		defer close(r.probed)
		p, refused := probe(r.work, socket, timeout)
		root.Send(self, &probed{run: r, plan: p, refused: refused})
	}()
}

// onProbed checks that no other socket holds the plan's name with another
// endpoint, then settles the attempt on its goroutine.
func (a *watcherActor) onProbed(ctx actor.Context, msg *probed) {
	e := a.entryOf(msg.run)
	if e == nil {
		delete(a.orphans, msg.run)
		msg.run.cancel() // its socket is gone: nothing was registered
		return
	}
	refused := msg.refused
	if refused == nil {
		if holder := a.holder(msg.plan.name, e); holder != nil && holder.plan.endpoint != msg.plan.endpoint {
			refused = refuse(ReasonConflict, true, "registration socket %s: plugin %q is already registered by registration socket %s with endpoint %s, not %s; remove one of the two sidecars",
				e.socket, msg.plan.name, holder.socket, holder.plan.endpoint, msg.plan.endpoint)
			e.waits = msg.plan.name
		}
	}
	if refused == nil {
		a.replacePlan(ctx, e, msg.plan)
	} else if e.claimed {
		a.withdraw(ctx, e)
	}
	r, reg, socket, p, timeout := msg.run, a.cfg.Registry, e.socket, msg.plan, a.cfg.Timeout
	r.settling = true
	root, self := ctx.ActorSystem().Root, ctx.Self()
	go func() {
		defer close(r.done)
		refused, err := settle(r.work, reg, socket, p, refused, timeout)
		root.Send(self, &settled{run: r, plan: p, refused: refused, notified: err})
	}()
}

func (a *watcherActor) onSettled(ctx actor.Context, msg *settled) {
	msg.run.cancel()
	e := a.entryOf(msg.run)
	if e == nil {
		a.settledOrphan(ctx, msg)
		return
	}
	e.run = nil
	if e.again {
		a.start(ctx, e)
		return
	}
	if msg.refused != nil {
		a.failed(ctx, e, msg.refused, msg.notified)
		return
	}
	e.history, e.slow, e.refused = nil, false, nil
	e.status.State, e.status.Error, e.status.Failures = messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_REGISTERED, "", 0
	e.status.Address, e.status.Registered = "unix://"+e.plan.endpoint, e.plan.plugins
	types := make([]string, 0, len(e.plan.plugins))
	for _, p := range e.plan.plugins {
		types = append(types, p.GetType())
	}
	a.log.Info("plugin registered by its registration socket", "plugin", e.plan.name, "socket", e.socket,
		"endpoint", e.plan.endpoint, "as", strings.Join(types, ", "), "alloc", AllocID(e.socket), "notify_error", msg.notified)
	a.changed()
}

// failed records a refusal: logged, counted, shown; a permanent one waits
// for the socket to change, any other is tried again after the backoff.
func (a *watcherActor) failed(ctx actor.Context, e *entry, r *refusal, notified error) {
	if a.cfg.Metrics != nil {
		a.cfg.Metrics.Refused(r.reason)
	}
	if e.claimed {
		a.withdraw(ctx, e)
	}
	e.refused = r
	e.status.Failures++
	e.status.Error, e.status.Registered = r.Error(), nil
	if r.permanent {
		a.log.Error("registration refused: waiting for the registration socket to change", "socket", e.socket,
			"reason", r.reason, "error", r.err, "notify_error", notified)
		e.status.State = messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_FAILED
		a.changed()
		return
	}
	now := a.cfg.Clock.Now()
	delay := a.cfg.SlowRetry
	if !e.slow {
		d := supervisor.Decide(a.cfg.Retry, e.history, now, r, rand.Float64())
		e.history = d.History
		if d.Directive == supervisor.Restart {
			delay = d.Delay
		} else {
			e.slow = true
		}
	}
	a.log.Warn("registration failed: trying again", "socket", e.socket, "reason", r.reason, "error", r.err,
		"delay", delay, "failures", e.status.GetFailures(), "notify_error", notified)
	e.status.State, e.status.NextAttemptTime = messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_ACTIVATING, timestamppb.New(now.Add(delay))
	root, self, due, socket := ctx.ActorSystem().Root, ctx.Self(), &retryTimer{}, e.socket
	e.timer, e.due = a.cfg.Clock.AfterFunc(delay, func() { root.Send(self, &retryDue{socket: socket, timer: due}) }), due
	a.changed()
}

func (a *watcherActor) onRetryDue(ctx actor.Context, msg *retryDue) {
	if e := a.entries[msg.socket]; e != nil && e.due == msg.timer && !a.stopping {
		e.timer, e.due = nil, nil
		a.start(ctx, e)
	}
}

// gone forgets a socket that went away: its registrations are withdrawn,
// and the sockets refused for claiming its name are tried again.
func (a *watcherActor) gone(ctx actor.Context, e *entry) {
	a.log.Info("registration socket removed: deregistering its plugin", "socket", e.socket, "plugin", e.plan.name)
	delete(a.entries, e.socket)
	a.stopTimer(e)
	if e.run != nil {
		e.run.cancel()
		a.orphans[e.run] = true
	}
	name := e.plan.name
	if e.claimed {
		a.withdraw(ctx, e)
		for _, other := range a.entries {
			if other.waits == name && other.run == nil {
				a.start(ctx, other)
			}
		}
	}
	a.changed()
}

// settledOrphan ends a run whose socket went away meanwhile: what it
// registered is withdrawn, unless a socket came back at the same path,
// which is registered again instead (it shares the allocation).
func (a *watcherActor) settledOrphan(ctx actor.Context, msg *settled) {
	delete(a.orphans, msg.run)
	if msg.refused != nil {
		return
	}
	if e := a.entries[msg.run.socket]; e != nil {
		a.start(ctx, e)
		return
	}
	for _, p := range msg.plan.plugins {
		ctx.Send(a.cfg.Registry.PID(), &messages.DeregisterPlugin{Type: p.GetType(), Name: p.GetName(), AllocId: p.GetAllocId()})
	}
}

// replacePlan makes plan e's, withdrawing the registrations of its former
// plan that the new one no longer makes (another name, no controller).
func (a *watcherActor) replacePlan(ctx actor.Context, e *entry, p plan) {
	keep := map[[2]string]bool{}
	for _, q := range p.plugins {
		keep[[2]string{q.GetType(), q.GetName()}] = true
	}
	for _, q := range e.plan.plugins {
		if !keep[[2]string{q.GetType(), q.GetName()}] {
			ctx.Send(a.cfg.Registry.PID(), &messages.DeregisterPlugin{Type: q.GetType(), Name: q.GetName(), AllocId: q.GetAllocId()})
		}
	}
	e.plan, e.claimed = p, true
	e.status.Name = p.name
}

// withdraw deregisters e's registrations and releases its name. Nobody
// waits for the answers: the cleanup after each scan catches anything left.
func (a *watcherActor) withdraw(ctx actor.Context, e *entry) {
	for _, p := range e.plan.plugins {
		ctx.Send(a.cfg.Registry.PID(), &messages.DeregisterPlugin{Type: p.GetType(), Name: p.GetName(), AllocId: p.GetAllocId()})
	}
	e.plan, e.claimed = plan{}, false
}

// cleanup withdraws every registration the watcher made for a socket it
// no longer has: left over by a socket removed while the agent was down,
// or by an attempt that settled after its socket went.
func (a *watcherActor) cleanup(ctx actor.Context) {
	s := a.cfg.Registry.Snapshot()
	for _, t := range s.Types() {
		for _, current := range s.List(t) {
			for _, p := range s.Allocations(t, current.GetName()) {
				socket := p.GetOptions()[OptionSocket]
				if socket == "" || a.entries[socket] != nil {
					continue
				}
				a.log.Info("removing a registration whose registration socket is gone", "type", t, "name", p.GetName(), "socket", socket)
				ctx.Send(a.cfg.Registry.PID(), &messages.DeregisterPlugin{Type: t, Name: p.GetName(), AllocId: p.GetAllocId()})
			}
		}
	}
}

// holder returns the socket other than e that holds name.
func (a *watcherActor) holder(name string, e *entry) *entry {
	for _, other := range a.entries {
		if other != e && other.claimed && other.plan.name == name {
			return other
		}
	}
	return nil
}

func (a *watcherActor) entryOf(r *run) *entry {
	for _, e := range a.entries {
		if e.run == r {
			return e
		}
	}
	return nil
}

func (a *watcherActor) stopTimer(e *entry) {
	if e.timer != nil {
		e.timer.Stop()
		e.timer, e.due = nil, nil
	}
}

// changed publishes every socket's state to Plugins.
func (a *watcherActor) changed() {
	list := make([]*messages.DiscoveredPlugin, 0, len(a.entries))
	for _, e := range a.entries {
		list = append(list, proto.CloneOf(e.status))
	}
	slices.SortFunc(list, func(x, y *messages.DiscoveredPlugin) int { return strings.Compare(x.GetSource(), y.GetSource()) })
	a.published.Store(&list)
}

// onStopping stops the timers and cancels and waits for the scan and the
// attempts in flight, so that nothing outlives the actor.
func (a *watcherActor) onStopping() {
	a.stopping = true
	if a.scan != nil {
		a.scan.wait()
		a.scan = nil
	}
	for _, e := range a.entries {
		a.stopTimer(e)
		if e.run != nil {
			e.run.wait()
			e.run = nil
		}
	}
	for r := range a.orphans {
		r.wait()
	}
	a.orphans = map[*run]bool{}
}
