package registry

import (
	"maps"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/storage"
)

// pluginsActor owns every plugin's allocations: type → name → allocations,
// newest first. It is the only writer of that state.
//
// A write is applied to the working tables at once, so the next command
// sees it, and queued for the store. One batch is written at a time, off
// the actor's goroutine; while it is written the next commands queue up and
// go to disk together in the next batch (group commit). Only once a batch is
// durable does the actor publish its snapshot, send its events and answer
// its callers. If the store fails, the batch's callers get ErrStore and the
// working tables roll back to the last durable snapshot, with the commands
// queued since re-applied on top.
type pluginsActor struct {
	log       hclog.Logger
	bucket    storage.Bucket
	published *atomic.Pointer[Snapshot]
	metrics   Metrics
	limits    Limits

	tables    map[string]*pluginTable // working state, durable or not
	dirty     map[string]bool         // types changed since the last batch was cut
	seq       uint64                  // last sequence handed out
	committed *Snapshot               // last durable state, as published
	pending   *Snapshot               // state once the in-flight batch is durable

	queue    []*write // accepted, waiting for the next batch
	inflight []*write // being written; nil when no batch is in flight

	subs     *subscribers // outlives a restart: see New
	closing  bool
	shutdown []*actor.PID // who waits for ShutdownRegistryResponse

	stopped func() // called when the actor has stopped: ends its goroutine
}

// write is one accepted command on its way to disk.
type write struct {
	cmd     proto.Message // *messages.RegisterPlugin or *messages.DeregisterPlugin
	replyTo *actor.PID
	ptype   string
	event   proto.Message // nil when the command changed nothing
	ops     []storage.Op
	err     error // a refusal decided against the working state
	arrived time.Time
}

// batchWritten is sent to the actor by the goroutine that wrote a batch.
type batchWritten struct{ err error }

// newPluginsActor starts from the last published snapshot, the durable
// state, with working tables cloned from it. A restarted actor (after a
// panic) does the same: the writes it had accepted but not yet answered
// are lost with the old instance, and their callers get no answer.
func newPluginsActor(cfg Config, published *atomic.Pointer[Snapshot], subs *subscribers) *pluginsActor {
	committed := published.Load()
	tables := make(map[string]*pluginTable, len(committed.tables))
	for ptype, t := range committed.tables {
		tables[ptype] = t.clone()
	}
	return &pluginsActor{
		log:       cfg.Logger,
		bucket:    cfg.Bucket,
		published: published,
		metrics:   cfg.Metrics,
		limits:    cfg.Limits,
		tables:    tables,
		dirty:     map[string]bool{},
		seq:       committed.sequence,
		committed: committed,
		subs:      subs,
	}
}

// Receive handles the registry's commands, queries and internal results.
func (a *pluginsActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *messages.RegisterPlugin:
		a.onCommand(ctx, msg, msg.GetReplyTo())
	case *messages.DeregisterPlugin:
		a.onCommand(ctx, msg, msg.GetReplyTo())
	case *batchWritten:
		a.onBatchWritten(ctx, msg)
	case *messages.Subscribe:
		a.onSubscribe(ctx, msg)
	case *messages.Unsubscribe:
		a.onUnsubscribe(ctx, msg)
	case *actor.Terminated:
		a.subs.drop(msg.GetWho())
		a.metrics.Subscribers(a.subs.len())
	case *messages.ShutdownRegistry:
		a.onShutdown(ctx, msg)
	case *actor.Stopped:
		if a.stopped != nil {
			a.stopped()
		}
	}
}

func (a *pluginsActor) onCommand(ctx actor.Context, cmd proto.Message, replyTo *actor.PID) {
	w := &write{cmd: cmd, replyTo: replyTo, arrived: time.Now()}
	if w.replyTo == nil {
		w.replyTo = ctx.Sender()
	}
	if a.closing {
		a.reply(ctx, w, errorf(ErrShutdown, "registry is shutting down"))
		return
	}
	if err := a.apply(w); err != nil {
		a.reply(ctx, w, err) // refused on its face: nothing changed, nothing to order
		return
	}
	a.queue = append(a.queue, w)
	a.flush(ctx)
}

// apply runs a command against the working tables. It returns an error only
// for input that is bad on its face; refusals that depend on the state are
// kept in w.err and answered in order with the other writes.
func (a *pluginsActor) apply(w *write) error {
	w.event, w.ops, w.err = nil, nil, nil
	switch cmd := w.cmd.(type) {
	case *messages.RegisterPlugin:
		if err := ValidatePlugin(cmd.GetPlugin()); err != nil {
			return err
		}
		if err := a.limits.checkOptions(cmd.GetPlugin()); err != nil {
			return err
		}
		w.ptype = cmd.GetPlugin().GetType()
		a.applyRegister(w, cmd.GetPlugin())
	case *messages.DeregisterPlugin:
		for _, err := range []error{
			ValidateID("plugin type", cmd.GetType()),
			ValidateID("plugin name", cmd.GetName()),
			ValidateID("alloc ID", cmd.GetAllocId()),
		} {
			if err != nil {
				return err
			}
		}
		w.ptype = cmd.GetType()
		a.applyDeregister(w, cmd.GetName(), cmd.GetAllocId())
	}
	return nil
}

func (a *pluginsActor) table(ptype string) *pluginTable {
	t, ok := a.tables[ptype]
	if !ok {
		t = newPluginTable()
		a.tables[ptype] = t
	}
	return t
}

func (a *pluginsActor) applyRegister(w *write, p *messages.PluginInfo) {
	t := a.table(p.GetType())
	current, hasCurrent := t.currentOf(p.GetName())
	old, known := t.get(p.GetName(), p.GetAllocId())
	if known && proto.Equal(old.info, p) {
		return // identical re-registration: nothing changes, nothing is said
	}
	if known {
		a.seq++
		a.dirty[p.GetType()] = true
		updated := &allocation{info: p, order: old.order}
		t.put(updated)
		w.event = &messages.PluginUpdated{Plugin: p, Previous: old.info, IsCurrent: current.order == old.order, Sequence: a.seq}
		w.ops = []storage.Op{putOp(updated)}
		return
	}
	if err := a.limits.checkRoom(p.GetType(), t.allocs.Len()); err != nil {
		w.err = err
		return
	}
	a.seq++
	a.dirty[p.GetType()] = true
	added := &allocation{info: p, order: a.seq}
	t.put(added)
	event := &messages.PluginRegistered{Plugin: p, Sequence: a.seq}
	if hasCurrent {
		event.Previous = current.info
	}
	w.event, w.ops = event, []storage.Op{putOp(added)}
}

func (a *pluginsActor) applyDeregister(w *write, name, allocID string) {
	t, ok := a.tables[w.ptype]
	if !ok {
		w.err = errorf(ErrNotFound, "no plugin of type %q is registered", w.ptype)
		return
	}
	old, ok := t.get(name, allocID)
	if !ok {
		w.err = errorf(ErrNotFound, "plugin %q of type %q has no allocation %q", name, w.ptype, allocID)
		return
	}
	current, _ := t.currentOf(name)
	t.remove(old)
	a.seq++
	a.dirty[w.ptype] = true
	event := &messages.PluginDeregistered{Plugin: old.info, CurrentChanged: current.order == old.order, Sequence: a.seq}
	if now, ok := t.currentOf(name); ok {
		event.Current = now.info
	} else {
		event.Gone = true
	}
	w.event, w.ops = event, []storage.Op{deleteOp(old.info)}
}

// flush starts writing the queued commands as one batch, unless a batch is
// already in flight; then they wait for it and go in the next one.
func (a *pluginsActor) flush(ctx actor.Context) {
	if a.inflight != nil || len(a.queue) == 0 {
		return
	}
	a.inflight, a.queue = a.queue, nil
	a.pending = a.cut()
	var ops []storage.Op
	for _, w := range a.inflight {
		ops = append(ops, w.ops...)
	}
	if len(ops) == 0 {
		a.onBatchWritten(ctx, &batchWritten{})
		return
	}
	a.metrics.Batch(len(a.inflight))
	bucket, root, self := a.bucket, ctx.ActorSystem().Root, ctx.Self()
	go func() { root.Send(self, &batchWritten{err: bucket.Apply(ops)}) }()
}

// cut freezes the working tables into the snapshot that will be published
// once the batch being cut is durable. Only changed types are cloned, each
// in O(1).
func (a *pluginsActor) cut() *Snapshot {
	tables := maps.Clone(a.committed.tables)
	for ptype := range a.dirty {
		tables[ptype] = a.tables[ptype].clone()
	}
	clear(a.dirty)
	return newSnapshot(tables, a.seq)
}

func (a *pluginsActor) onBatchWritten(ctx actor.Context, msg *batchWritten) {
	if a.pending == nil {
		// A batch of the instance that panicked: its writes were dropped
		// with it (see newPluginsActor).
		a.log.Warn("a batch written before the registry actor restarted is not published", "error", msg.err)
		return
	}
	batch := a.inflight
	a.inflight = nil
	if msg.err != nil {
		a.log.Error("durable write failed: refusing the batch and rolling back", "writes", len(batch), "error", msg.err)
		err := errorf(ErrStore, "%v", msg.err)
		for _, w := range batch {
			a.reply(ctx, w, err)
		}
		a.rollback(ctx)
	} else {
		a.publish(ctx, batch)
	}
	a.pending = nil
	a.flush(ctx)
	a.finishShutdown(ctx)
}

func (a *pluginsActor) publish(ctx actor.Context, batch []*write) {
	a.committed = a.pending
	close(a.published.Swap(a.committed).next)
	for _, w := range batch {
		if w.event != nil {
			a.logEvent(w.event)
			a.metrics.EventsSent(a.subs.publish(ctx, w.ptype, w.event))
		}
		a.reply(ctx, w, w.err)
	}
}

// rollback resets the working tables to the last durable snapshot and
// re-applies the commands queued since the failed batch was cut.
func (a *pluginsActor) rollback(ctx actor.Context) {
	a.tables = make(map[string]*pluginTable, len(a.committed.tables))
	for ptype, t := range a.committed.tables {
		a.tables[ptype] = t.clone()
	}
	a.seq = a.committed.sequence
	clear(a.dirty)
	queued := a.queue
	a.queue = nil
	for _, w := range queued {
		if err := a.apply(w); err != nil {
			a.reply(ctx, w, err)
			continue
		}
		a.queue = append(a.queue, w)
	}
}

func (a *pluginsActor) reply(ctx actor.Context, w *write, err error) {
	var resp proto.Message
	switch w.cmd.(type) {
	case *messages.RegisterPlugin:
		a.metrics.Write("register", err, time.Since(w.arrived))
		resp = &messages.RegisterPluginResponse{Error: toProto(err)}
	case *messages.DeregisterPlugin:
		a.metrics.Write("deregister", err, time.Since(w.arrived))
		resp = &messages.DeregisterPluginResponse{Error: toProto(err)}
	}
	if w.replyTo != nil {
		ctx.Send(w.replyTo, resp)
	}
}

func (a *pluginsActor) logEvent(event proto.Message) {
	if !a.log.IsInfo() {
		return // spare building the arguments: a tenth of a busy registry's CPU
	}
	switch ev := event.(type) {
	case *messages.PluginRegistered:
		a.log.Info("plugin registered", "type", ev.GetPlugin().GetType(), "name", ev.GetPlugin().GetName(),
			"alloc", ev.GetPlugin().GetAllocId(), "replaces", ev.GetPrevious().GetAllocId())
	case *messages.PluginUpdated:
		a.log.Info("plugin updated", "type", ev.GetPlugin().GetType(), "name", ev.GetPlugin().GetName(),
			"alloc", ev.GetPlugin().GetAllocId(), "current", ev.GetIsCurrent())
	case *messages.PluginDeregistered:
		a.log.Info("plugin deregistered", "type", ev.GetPlugin().GetType(), "name", ev.GetPlugin().GetName(),
			"alloc", ev.GetPlugin().GetAllocId(), "now_current", ev.GetCurrent().GetAllocId(), "gone", ev.GetGone())
	}
}

func (a *pluginsActor) onSubscribe(ctx actor.Context, msg *messages.Subscribe) {
	sub := msg.GetSubscriber()
	if sub == nil {
		a.log.Warn("subscribe without a subscriber address: ignored", "sender", ctx.Sender())
		return
	}
	if msg.GetType() != "" {
		if err := ValidateID("plugin type", msg.GetType()); err != nil {
			a.log.Warn("subscribe refused", "subscriber", sub, "error", err)
			return
		}
	}
	a.subs.add(ctx, msg.GetType(), sub)
	a.metrics.Subscribers(a.subs.len())
	ack := &messages.Subscribed{Type: msg.GetType(), Sequence: a.committed.sequence}
	if msg.GetReplay() {
		ack.Current = a.committed.List(msg.GetType())
	}
	ctx.Send(sub, ack)
}

func (a *pluginsActor) onUnsubscribe(ctx actor.Context, msg *messages.Unsubscribe) {
	sub := msg.GetSubscriber()
	if sub == nil {
		return
	}
	a.subs.remove(ctx, msg.GetType(), sub)
	a.metrics.Subscribers(a.subs.len())
	ctx.Send(sub, &messages.Unsubscribed{Type: msg.GetType()})
}

func (a *pluginsActor) onShutdown(ctx actor.Context, msg *messages.ShutdownRegistry) {
	a.closing = true
	replyTo := msg.GetReplyTo()
	if replyTo == nil {
		replyTo = ctx.Sender()
	}
	if replyTo != nil {
		a.shutdown = append(a.shutdown, replyTo)
	}
	a.finishShutdown(ctx)
}

// finishShutdown answers the shutdown once every accepted write is durable.
func (a *pluginsActor) finishShutdown(ctx actor.Context) {
	if !a.closing || a.inflight != nil || len(a.queue) > 0 {
		return
	}
	for _, pid := range a.shutdown {
		ctx.Send(pid, &messages.ShutdownRegistryResponse{})
	}
	a.shutdown = nil
}
