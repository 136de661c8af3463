package manager

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/btree"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/plugvisor/plugvisor/actors/plugintype"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/supervisor"
)

// fingerprints holds one fingerprint per plugin (type, name), sorted. The
// manager actor changes its own; a clone, published after each change, is
// read concurrently by Plugins (the trees share nodes copy-on-write).
type fingerprints = btree.BTreeG[*messages.CSIFingerprint]

func newFingerprints() *fingerprints {
	return btree.NewG(16, func(a, b *messages.CSIFingerprint) bool {
		return cmp.Or(cmp.Compare(a.GetType(), b.GetType()), cmp.Compare(a.GetName(), b.GetName())) < 0
	})
}

// sortedFingerprints returns the fingerprints of t in order.
func sortedFingerprints(t *fingerprints) []*messages.CSIFingerprint {
	out := make([]*messages.CSIFingerprint, 0, t.Len())
	t.Ascend(func(fp *messages.CSIFingerprint) bool {
		out = append(out, fp)
		return true
	})
	return out
}

// instanceState is what the manager knows of one instance actor, current
// or on its way out, until it has terminated.
type instanceState struct {
	plugin      *messages.PluginInfo     // the allocation it serves
	fingerprint *messages.CSIFingerprint // the latest it reported, or the manager said for it
	final       bool                     // its final fingerprint arrived
	failed      bool                     // it gave up: its later fingerprints are not listed
}

// describeInstance names an instance in logs and errors.
func describeInstance(p *messages.PluginInfo) string {
	return fmt.Sprintf("%s/%s (alloc %s)", p.GetType(), p.GetName(), p.GetAllocId())
}

// managerActor is the CSI manager. plugintype.Instances keeps which
// instance serves which plugin; the manager keeps what each instance
// reported, the latest fingerprint of each plugin, and who hears of them.
// Its SubscribeCSI subscribers get every fingerprint and health change in
// order, none lost while they live (ARCHITECTURE.md, "Event ordering"); the
// messages are shared: treat them as read-only.
type managerActor struct {
	cfg       Config
	log       hclog.Logger
	published *atomic.Pointer[fingerprints]

	instances   *plugintype.Instances
	states      map[string]*instanceState       // by instance PID ID, until it terminated
	stopping    map[string]*messages.PluginInfo // instances asked to stop that have not terminated, by PID ID
	listed      *fingerprints                   // the latest fingerprint of each plugin's current instance
	subscribers *plugintype.Subscribers
	held        map[pluginKey][]heldWord // final words held back until the instance that took over speaks (held.go)
	closing     *closing                 // set once ShutdownCSIManager arrived
}

// closing is the state of a shutdown.
type closing struct {
	replyTo  []*actor.PID
	timer    supervisor.Stopper
	answered *messages.ShutdownCSIManagerResponse
}

// shutdownTimedOut is sent by the manager's shutdown timer to the manager.
type shutdownTimedOut struct{}

// newManagerActor makes the manager's state anew; subscribers are passed
// in so that they outlive a restart after a panic.
func newManagerActor(cfg Config, published *atomic.Pointer[fingerprints], subscribers *plugintype.Subscribers) *managerActor {
	a := &managerActor{
		cfg:         cfg,
		log:         cfg.Logger,
		published:   published,
		states:      map[string]*instanceState{},
		stopping:    map[string]*messages.PluginInfo{},
		listed:      newFingerprints(),
		subscribers: subscribers,
		held:        map[pluginKey][]heldWord{},
	}
	a.instances = plugintype.New(plugintype.Config{
		Types:          []string{csi.TypeController, csi.TypeNode},
		Registry:       cfg.Registry.PID(),
		Snapshot:       func() plugintype.Snapshot { return cfg.Registry.Snapshot() },
		ResyncInterval: cfg.ResyncInterval,
		Logger:         cfg.Logger,
		Metrics:        cfg.Metrics,
	}, a)
	return a
}

// Receive hands the instances' life cycle to plugintype.Instances, then
// handles instance reports, subscriptions, queries and shutdown.
func (a *managerActor) Receive(ctx actor.Context) {
	if ev, ok := ctx.Message().(*messages.ChildSupervised); ok {
		a.onChildSupervised(ctx, ev) // first: Instances tells the hooks less than the event says
	}
	if a.instances.Receive(ctx) {
		a.finishShutdown(ctx)
		return
	}
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		a.published.Store(a.listed.Clone())
		a.log.Info("CSI manager started", "resync_interval", a.cfg.ResyncInterval, "fingerprint_interval", a.cfg.Fingerprint.Interval)
	case *messages.CSIInstanceFingerprinted:
		a.onFingerprinted(ctx, msg)
	case *actor.Terminated:
		a.subscribers.Drop(msg.GetWho())
	case *messages.SubscribeCSI:
		a.onSubscribeCSI(ctx, msg)
	case *messages.ListCSIPluginsRequest:
		a.onList(ctx, msg)
	case *messages.ShutdownCSIManager:
		a.onShutdown(ctx, msg)
	case *shutdownTimedOut:
		a.answerShutdown(ctx)
	case *actor.Stopping, *actor.Restarting:
		a.stopShutdownTimer()
	}
}

// InstanceProps implements plugintype.Type: a plugin instance actor
// reporting to the manager.
func (a *managerActor) InstanceProps(ctx actor.Context, plugin *messages.PluginInfo) (*actor.Props, error) {
	return NewInstanceProps(InstanceConfig{
		Plugin:      plugin,
		ReportTo:    ctx.Self(),
		Logger:      a.log.Named("instance"),
		Fingerprint: a.cfg.Fingerprint,
		Clock:       a.cfg.Clock,
	})
}

// InstanceStopped implements plugintype.Type: the plugin is no longer
// listed; the instance's final fingerprint and its end come later.
func (a *managerActor) InstanceStopped(ctx actor.Context, plugin *messages.PluginInfo, instance *actor.PID, _ string) {
	a.unlist(plugin)
	a.release(ctx, plugin.GetType(), plugin.GetName())
	if instance != nil {
		a.stopping[instance.GetId()] = plugin
	}
}

// InstanceFailed implements plugintype.Type: the plugin is listed
// unhealthy and reported failed. (plugintype has logged it.)
func (a *managerActor) InstanceFailed(ctx actor.Context, plugin *messages.PluginInfo, instance *actor.PID, reason string) {
	description := "plugin instance failed: " + reason
	if instance != nil {
		st := a.state(instance, plugin)
		a.recordUnhealthy(ctx, instance, st, description)
		st.failed = true
	} else {
		fp := baseFingerprint(plugin)
		fp.HealthDescription, fp.UpdateTime = description, timestamppb.New(a.cfg.Clock.Now())
		a.list(fp)
		a.release(ctx, plugin.GetType(), plugin.GetName())
	}
	a.subscribers.Publish(ctx, &messages.CSIPluginFailed{
		Type: plugin.GetType(), Name: plugin.GetName(), AllocId: plugin.GetAllocId(), Reason: reason, Restarts: a.instances.Restarts(instance),
	})
}

// InstanceGone implements plugintype.Type: an instance that ended without
// its final fingerprint gets one from the manager.
func (a *managerActor) InstanceGone(ctx actor.Context, plugin *messages.PluginInfo, instance *actor.PID) {
	if st := a.state(instance, plugin); !st.final {
		a.recordUnhealthy(ctx, instance, st, csi.StoppedDescription)
	}
	delete(a.states, instance.GetId())
	delete(a.stopping, instance.GetId())
}

// state returns what the manager knows of instance, serving plugin.
func (a *managerActor) state(instance *actor.PID, plugin *messages.PluginInfo) *instanceState {
	st, ok := a.states[instance.GetId()]
	if !ok {
		st = &instanceState{plugin: plugin}
		a.states[instance.GetId()] = st
	}
	return st
}

func (a *managerActor) onFingerprinted(ctx actor.Context, msg *messages.CSIInstanceFingerprinted) {
	instance := msg.GetInstance()
	if !a.instances.Known(instance) {
		a.log.Debug("fingerprint from an unknown instance: ignored", "instance", instance)
		return
	}
	fp := msg.GetFingerprint()
	st := a.state(instance, &messages.PluginInfo{Type: fp.GetType(), Name: fp.GetName(), AllocId: fp.GetAllocId()})
	st.final = st.final || msg.GetFinal()
	a.record(ctx, instance, st, fp)
}

// record makes fp the latest fingerprint of instance, lists it when the
// instance is current (and has not failed), and publishes it, unless it
// is a final word held back (held.go). A current instance's word releases
// the words held for its plugin, after its own.
func (a *managerActor) record(ctx actor.Context, instance *actor.PID, st *instanceState, fp *messages.CSIFingerprint) {
	prev := st.fingerprint
	_, current := a.instances.Current(instance)
	if !current {
		fp = a.markReplaced(fp)
	}
	st.fingerprint = fp
	if current && !st.failed {
		a.list(fp)
	}
	if !current && a.hold(prev, fp) {
		return
	}
	a.publish(ctx, prev, fp, current)
	if current {
		a.release(ctx, fp.GetType(), fp.GetName())
	}
}

// publish tells the subscribers of fp, and of the health change from prev
// when there was one.
func (a *managerActor) publish(ctx actor.Context, prev, fp *messages.CSIFingerprint, current bool) {
	a.subscribers.Publish(ctx, &messages.CSIPluginFingerprinted{Fingerprint: fp})
	if prev != nil && prev.GetHealthy() == fp.GetHealthy() {
		return
	}
	level, what := hclog.Info, "plugin is healthy"
	switch {
	case fp.GetHealthy():
	case !current:
		what = "plugin instance is no longer current" // replaced or removed: news, but no trouble
	default:
		level, what = hclog.Warn, "plugin is unhealthy"
	}
	a.log.Log(level, what, "type", fp.GetType(), "name", fp.GetName(), "alloc", fp.GetAllocId(),
		"description", fp.GetHealthDescription())
	a.subscribers.Publish(ctx, &messages.CSIPluginHealthChanged{
		Type: fp.GetType(), Name: fp.GetName(), AllocId: fp.GetAllocId(),
		Healthy: fp.GetHealthy(), Description: fp.GetHealthDescription(),
	})
}

// markReplaced is fp, the fingerprint of an instance that is no longer
// current, naming in replaced_by the allocation whose instance serves the
// plugin now, when it is the final one and another instance took over (a
// newer allocation's, an older one's handed the plugin back, or the same
// allocation's at its new socket): the catalog keeps the plugin until the
// new instance's first fingerprint.
func (a *managerActor) markReplaced(fp *messages.CSIFingerprint) *messages.CSIFingerprint {
	if fp.GetHealthy() || fp.GetHealthDescription() != csi.StoppedDescription {
		return fp
	}
	by := a.instances.Serving(fp.GetType(), fp.GetName())
	if by == nil || by.GetAllocId() == fp.GetReplacedBy() {
		return fp
	}
	fp = proto.CloneOf(fp)
	fp.ReplacedBy = by.GetAllocId()
	return fp
}

// recordUnhealthy records, for an instance that cannot say it itself, its
// latest fingerprint made unhealthy with description.
func (a *managerActor) recordUnhealthy(ctx actor.Context, instance *actor.PID, st *instanceState, description string) {
	fp := baseFingerprint(st.plugin)
	if st.fingerprint != nil {
		fp = proto.CloneOf(st.fingerprint)
	}
	fp.Healthy, fp.HealthDescription = false, description
	fp.UpdateTime = timestamppb.New(a.cfg.Clock.Now())
	a.record(ctx, instance, st, fp)
}

func (a *managerActor) list(fp *messages.CSIFingerprint) {
	a.listed.ReplaceOrInsert(fp)
	a.published.Store(a.listed.Clone())
}

func (a *managerActor) unlist(plugin *messages.PluginInfo) {
	if _, ok := a.listed.Delete(&messages.CSIFingerprint{Type: plugin.GetType(), Name: plugin.GetName()}); ok {
		a.published.Store(a.listed.Clone())
	}
}

// onChildSupervised notes what plugintype.Instances does not pass on: a
// current instance waiting out a backoff is unhealthy. (Instances counts
// the restarts and tells the Metrics.)
func (a *managerActor) onChildSupervised(ctx actor.Context, ev *messages.ChildSupervised) {
	plugin, current := a.instances.Current(ev.GetChild())
	if !current || ev.GetDecision() != messages.SupervisionDecision_SUPERVISION_DECISION_BACKING_OFF {
		return
	}
	a.recordUnhealthy(ctx, ev.GetChild(), a.state(ev.GetChild(), plugin), fmt.Sprintf("plugin instance failed (%s): restarting in %v",
		ev.GetReason(), ev.GetDelay().AsDuration()))
}

func (a *managerActor) onSubscribeCSI(ctx actor.Context, msg *messages.SubscribeCSI) {
	var replay []any
	if msg.GetReplay() {
		for _, fp := range sortedFingerprints(a.listed) {
			replay = append(replay, &messages.CSIPluginFingerprinted{Fingerprint: fp})
		}
	}
	if !a.subscribers.Subscribe(ctx, msg.GetSubscriber(), replay...) {
		a.log.Warn("SubscribeCSI without a subscriber address: ignored")
	}
}

func (a *managerActor) onList(ctx actor.Context, msg *messages.ListCSIPluginsRequest) {
	if replyTo := cmp.Or(msg.GetReplyTo(), ctx.Sender()); replyTo != nil {
		ctx.Send(replyTo, &messages.ListCSIPluginsResponse{Plugins: sortedFingerprints(a.listed)})
	}
}

// onShutdown begins a shutdown: plugintype.Instances stops every instance
// and starts none again; finishShutdown answers once all have terminated,
// or the timer answers when time is up.
func (a *managerActor) onShutdown(ctx actor.Context, msg *messages.ShutdownCSIManager) {
	replyTo := cmp.Or(msg.GetReplyTo(), ctx.Sender())
	if a.closing != nil {
		switch {
		case replyTo == nil:
		case a.closing.answered != nil:
			ctx.Send(replyTo, a.closing.answered)
		default:
			a.closing.replyTo = append(a.closing.replyTo, replyTo)
		}
		return
	}
	a.closing = &closing{}
	if replyTo != nil {
		a.closing.replyTo = []*actor.PID{replyTo}
	}
	a.log.Info("CSI manager shutting down: stopping every plugin instance")
	timeout := cmp.Or(msg.GetTimeout().AsDuration(), a.cfg.ShutdownTimeout)
	root, self := ctx.ActorSystem().Root, ctx.Self()
	a.closing.timer = a.cfg.Clock.AfterFunc(timeout, func() { root.Send(self, &shutdownTimedOut{}) })
	a.instances.Close(ctx)
	a.finishShutdown(ctx)
}

// finishShutdown answers the shutdown once no instance is left.
func (a *managerActor) finishShutdown(ctx actor.Context) {
	if a.closing == nil || a.closing.answered != nil || len(a.stopping) > 0 {
		return
	}
	running := false
	a.instances.Each(func(*messages.PluginInfo, *actor.PID) { running = true })
	if !running {
		a.answerShutdown(ctx)
	}
}

// answerShutdown answers the shutdown, once: every instance has stopped,
// or the time is up and the answer names those that have not.
func (a *managerActor) answerShutdown(ctx actor.Context) {
	if a.closing == nil || a.closing.answered != nil {
		return
	}
	a.stopShutdownTimer()
	res := &messages.ShutdownCSIManagerResponse{}
	for _, plugin := range a.stopping {
		res.NotStopped = append(res.NotStopped, describeInstance(plugin))
	}
	a.instances.Each(func(plugin *messages.PluginInfo, _ *actor.PID) {
		res.NotStopped = append(res.NotStopped, describeInstance(plugin))
	})
	slices.Sort(res.NotStopped)
	if len(res.NotStopped) > 0 {
		res.Error = &messages.Error{Message: fmt.Sprintf("csi: %d plugin instances did not stop in time: %s",
			len(res.NotStopped), strings.Join(res.NotStopped, ", "))}
		a.log.Error("plugin instances did not stop in time", "instances", strings.Join(res.NotStopped, ", "))
	} else {
		a.log.Info("every plugin instance stopped")
	}
	a.closing.answered = res
	for _, pid := range a.closing.replyTo {
		ctx.Send(pid, res)
	}
}

func (a *managerActor) stopShutdownTimer() {
	if a.closing != nil && a.closing.timer != nil {
		a.closing.timer.Stop()
		a.closing.timer = nil
	}
}
