package registry

import (
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/storage"
)

// pluginsActor owns every plugin's allocations: type → name → allocations,
// newest first. It is the only writer of that state. It promises that a
// write is answered only once durable, and only then shows in the
// published snapshot and the events; writes arrive from the facade's inbox
// (one drainInbox per batch) and as RegisterPlugin and DeregisterPlugin
// from actors, and go to disk in batches, as ARCHITECTURE.md's
// "Durability before acknowledgement (group commit)" says.
type pluginsActor struct {
	log       hclog.Logger
	writer    *storeWriter // nil with memory
	memory    *MemoryStore // Config.Memory: batches commit at once
	published *atomic.Pointer[Snapshot]
	metrics   Metrics
	missingOK bool // Config.DeregisterMissingIsNil
	limits    Limits

	tables    map[string]*pluginTable // working state, durable or not
	dirty     typeTables              // working tables changed since the last batch was cut
	gone      *gone                   // the order of recently deregistered allocations
	seq       uint64                  // last sequence handed out
	committed *Snapshot               // last durable state, as published
	pending   *Snapshot               // state once the in-flight batch is durable

	// registered and deregistered hand out the events of registrations
	// and deregistrations (see eventSlab).
	registered   eventSlab[messages.PluginRegistered]
	deregistered eventSlab[messages.PluginDeregistered]

	queue    []*write     // accepted, waiting for the next batch
	inflight []*write     // being written; nil when no batch is in flight
	spare    []*write     // a batch's slice, kept for a later queue
	ops      []storage.Op // the in-flight batch's ops, reused
	noted    bool         // a flushQueued is on its way
	// concurrent counts down the batches since the last one of several
	// writes: while it is above zero, callers are taken to be concurrent.
	concurrent int

	in       *inbox       // outlives a restart: see New
	subs     *subscribers // outlives a restart: see New
	closing  bool
	shutdown []*actor.PID // who waits for ShutdownRegistryResponse

	stopped func() // called when the actor has stopped: ends its goroutines
}

// concurrentMemory is how many batches of one write in a row it takes to
// decide that callers no longer write concurrently.
const concurrentMemory = 16

// batchWritten is sent to the actor by the goroutine that wrote a batch.
type batchWritten struct{ err error }

// inMemory is the batchWritten of every batch with Config.Memory.
var inMemory = batchWritten{}

// flushQueued is the actor's note to itself to write the commands queued
// from its mailbox, once the commands before the note have joined them.
type flushQueued struct{}

// newPluginsActor starts from the last published snapshot, the durable
// state, with working tables cloned from it. A restarted actor (after a
// panic) does the same: the writes it had accepted but not yet answered
// are lost with the old instance, and their callers get no answer (facade
// callers get a timeout error after Config.RequestTimeout).
func newPluginsActor(cfg Config, published *atomic.Pointer[Snapshot], writer *storeWriter, in *inbox, subs *subscribers) *pluginsActor {
	committed := published.Load()
	tables := committed.tables.working()
	return &pluginsActor{
		log:       cfg.Logger,
		writer:    writer,
		memory:    cfg.Memory,
		published: published,
		metrics:   cfg.Metrics,
		missingOK: cfg.DeregisterMissingIsNil,
		limits:    cfg.Limits,
		tables:    tables,
		gone:      newGone(),
		seq:       committed.sequence,
		committed: committed,
		in:        in,
		subs:      subs,
	}
}

// Receive handles the registry's commands, queries and internal results.
// It logs a panic's stack itself (actors.LogPanic) rather than through
// actors.PanicStack, whose middleware costs every message an envelope.
func (a *pluginsActor) Receive(ctx actor.Context) {
	defer actors.LogPanic(a.log, ctx)
	switch msg := ctx.Message().(type) {
	case drainInbox:
		a.onDrainInbox(ctx)
	case *messages.RegisterPlugin:
		a.onCommand(ctx, &write{plugin: msg.GetPlugin(), replyTo: msg.GetReplyTo()})
	case *messages.DeregisterPlugin:
		a.onCommand(ctx, &write{deregister: true, ptype: msg.GetType(), name: msg.GetName(),
			allocID: msg.GetAllocId(), replyTo: msg.GetReplyTo()})
	case flushQueued:
		a.noted = false
		a.flush(ctx)
	case *batchWritten:
		a.onBatchWritten(ctx, msg)
	case *messages.Subscribe:
		a.onSubscribe(ctx, msg, false)
	case *SubscribeInBatches:
		a.onSubscribe(ctx, msg.Subscribe, true)
	case *messages.Unsubscribe:
		a.onUnsubscribe(ctx, msg)
	case *subscribeChannel:
		a.onSubscribeChannel(msg)
	case *unsubscribeChannel:
		a.onUnsubscribeChannel(msg)
	case *actor.Terminated:
		a.subs.drop(msg.GetWho())
		a.metrics.Subscribers(a.subs.len())
	case *messages.ShutdownRegistry:
		a.onShutdown(ctx, msg)
	case *actor.Started:
		// After a restart, the inbox may hold writes whose wake-up the
		// old instance took with it.
		a.takeInbox(ctx)
		a.flush(ctx)
	case *actor.Stopped:
		a.onStopped(ctx)
	}
}

// onStopped refuses the writes that will never be written: those queued,
// and those the facade's callers left or will leave in the inbox. Writes
// of a batch in flight may be durable or not: their callers time out.
func (a *pluginsActor) onStopped(ctx actor.Context) {
	a.in.close()
	err := errorf(ErrShutdown, "the registry actor stopped")
	for _, w := range append(a.queue, a.in.take()...) {
		a.reply(ctx, w, err)
	}
	a.queue = nil
	a.subs.endSinks()
	if a.stopped != nil {
		a.stopped()
	}
}

// onDrainInbox takes every write in the inbox and starts a batch. While
// callers write concurrently (a recent batch held several writes), the
// actor yields once first so that those about to write join this batch. A
// lone caller is not kept waiting: a yield puts the actor behind every
// runnable goroutine (readers, on a busy machine) for a time slice.
func (a *pluginsActor) onDrainInbox(ctx actor.Context) {
	if a.concurrent > 0 {
		runtime.Gosched()
	}
	a.takeInbox(ctx)
	a.flush(ctx)
}

func (a *pluginsActor) takeInbox(ctx actor.Context) {
	taken := a.in.take()
	if len(taken) == 0 {
		a.in.recycle(taken)
		return
	}
	now := time.Now()
	for _, w := range taken {
		w.arrived = now
		a.accept(ctx, w)
	}
	a.in.recycle(taken)
}

func (a *pluginsActor) onCommand(ctx actor.Context, w *write) {
	w.arrived = time.Now()
	if w.replyTo == nil {
		w.replyTo = ctx.Sender()
	}
	if a.accept(ctx, w) && a.inflight == nil && !a.noted {
		a.noted = true
		ctx.Send(ctx.Self(), flushQueued{})
	}
}

// accept applies w and queues it, or answers it at once when it is
// refused on its face. It reports whether w was queued.
func (a *pluginsActor) accept(ctx actor.Context, w *write) bool {
	if a.closing {
		a.reply(ctx, w, errorf(ErrShutdown, "registry is shutting down"))
		return false
	}
	if err := a.apply(w); err != nil {
		a.reply(ctx, w, err) // refused on its face: nothing changed, nothing to order
		return false
	}
	a.queue = append(a.queue, w)
	return true
}

// apply runs a command against the working tables. It returns an error only
// for input that is bad on its face; refusals that depend on the state are
// kept in w.err and answered in order with the other writes.
func (a *pluginsActor) apply(w *write) error {
	w.event, w.op, w.err, w.gone = nil, storage.Op{}, nil, goneUntouched
	if !w.checked {
		if err := w.check(a.memory == nil); err != nil {
			return err
		}
	}
	if a.seq == maxSequence {
		// Only a corrupt sequence record gets here: a write a
		// nanosecond would take 292 years.
		return errorf(ErrLimit, "the registry's sequence numbers are used up (the last, %d, is handed out): its state file's sequence record is likely corrupt; restore the file from a backup", uint64(maxSequence))
	}
	if w.deregister {
		a.applyDeregister(w)
		return nil
	}
	if err := a.limits.checkOptions(w.plugin); err != nil {
		return err
	}
	a.applyRegister(w)
	return nil
}

func (a *pluginsActor) table(ptype string) *pluginTable {
	t, ok := a.tables[ptype]
	if !ok {
		t = newPluginTable()
		// A key of its own: ptype is a view into the string block of
		// the type's first registration (copyInto).
		a.tables[strings.Clone(ptype)] = t
	}
	return t
}

func (a *pluginsActor) applyRegister(w *write) {
	p := w.plugin
	t := a.table(w.ptype)
	current, old := t.find(p.GetName(), p.GetAllocId())
	hasCurrent, known := current != nil, old != nil
	if known && proto.Equal(old.info(), p) {
		return // identical re-registration: nothing changes, nothing is said
	}
	if known {
		a.seq++
		a.changed(w.ptype, t)
		updated := w.keep(old.order(), a.seq)
		t.put(updated)
		w.event = &messages.PluginUpdated{Plugin: updated.info(), Previous: old.info(), IsCurrent: current.order() == old.order(), Sequence: a.seq}
		w.op = a.putOp(updated, w.record)
		return
	}
	if err := a.limits.checkRoom(w.ptype, t.len()); err != nil {
		w.err = err
		return
	}
	a.seq++
	a.changed(w.ptype, t)
	order := a.seq
	if o, ok := a.gone.take(w.ptype, p.GetName(), p.GetAllocId()); ok {
		order = o
		w.gone, w.goneOrder = goneTaken, o
	}
	added := w.keep(order, a.seq)
	p = added.info()
	t.add(added)
	w.op = a.putOp(added, w.record)
	if hasCurrent && current.order() > order {
		w.event = &messages.PluginUpdated{Plugin: p, IsCurrent: false, Sequence: a.seq}
		return
	}
	event := a.registered.next()
	event.Plugin, event.Sequence = p, a.seq
	if hasCurrent {
		event.Previous = current.info()
	}
	w.event = event
}

func (a *pluginsActor) applyDeregister(w *write) {
	t, ok := a.tables[w.ptype]
	var current, old *allocation
	if ok {
		current, old = t.find(w.name, w.allocID)
	}
	if old == nil {
		if !a.missingOK {
			w.err = errorf(ErrNotFound, "plugin %q of type %q has no allocation %q", w.name, w.ptype, w.allocID)
		}
		return
	}
	now, hasNow := t.remove(old)
	a.gone.rememberPlugin(old.info(), old.order())
	w.gone = goneRemembered
	a.seq++
	a.changed(w.ptype, t)
	event := a.deregistered.next()
	event.Plugin, event.CurrentChanged, event.Sequence = old.info(), current.order() == old.order(), a.seq
	if hasNow {
		event.Current = now.info()
	} else {
		event.Gone = true
	}
	w.event = event
	if a.memory == nil {
		w.op = deleteOp(old.info())
	}
}

// flush starts writing the queued commands as one batch, unless a batch is
// already in flight; then they wait for it and go in the next one. A batch
// that changes nothing is answered at once and publishes no snapshot.
func (a *pluginsActor) flush(ctx actor.Context) {
	if a.inflight != nil || len(a.queue) == 0 {
		return
	}
	a.inflight, a.queue, a.spare = a.queue, a.spare[:0], nil
	changes := 0
	for _, w := range a.inflight {
		if w.event != nil {
			changes++
		}
	}
	a.metrics.Batch(len(a.inflight))
	if len(a.inflight) > 1 {
		a.concurrent = concurrentMemory
	} else if a.concurrent > 0 {
		a.concurrent--
	}
	if changes == 0 {
		batch := a.inflight
		a.inflight = nil
		a.replyAll(ctx, batch)
		a.recycle(batch)
		a.finishShutdown(ctx)
		return
	}
	a.pending = a.cut()
	if a.memory != nil {
		a.memory.keep(a.pending)
		a.onBatchWritten(ctx, &inMemory)
		return
	}
	ops := a.ops[:0]
	for _, w := range a.inflight {
		if w.event != nil {
			ops = append(ops, w.op)
		}
	}
	a.ops = append(ops, sequenceOp(a.seq))
	a.writer.write(ctx.ActorSystem().Root, ctx.Self(), a.ops)
}

// putOp is the store's op for al; none with memory.
func (a *pluginsActor) putOp(al *allocation, record []byte) storage.Op {
	if a.memory != nil {
		return storage.Op{}
	}
	return putOp(al, record)
}

// recycle keeps an answered batch's slice for a later queue.
func (a *pluginsActor) recycle(batch []*write) {
	clear(batch)
	a.spare = batch[:0]
}

// cut freezes the working tables into the snapshot that will be published
// once the batch being cut is durable. Only changed types are cloned, each
// in O(1).
func (a *pluginsActor) cut() *Snapshot {
	tables := a.committed.tables.with(a.dirty)
	for _, d := range a.dirty {
		d.table.dirty = false
	}
	clear(a.dirty)
	a.dirty = a.dirty[:0]
	return newSnapshot(tables, a.seq)
}

// changed notes that the working table t of ptype changed in this batch.
func (a *pluginsActor) changed(ptype string, t *pluginTable) {
	if !t.dirty {
		t.dirty = true
		a.dirty = append(a.dirty, typeTable{ptype, t})
	}
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
	clear(a.ops)
	if msg.err != nil {
		a.log.Error("durable write failed: refusing the batch and rolling back", "writes", len(batch), "error", msg.err)
		err := errorf(ErrStore, "%v", msg.err)
		for _, w := range batch {
			w.err = err
		}
		a.rollback(ctx, batch) // before the answers: an answered write goes back to its pool
		a.replyAll(ctx, batch)
	} else {
		a.publish(ctx, batch)
	}
	a.pending = nil
	a.recycle(batch)
	a.flush(ctx)
	a.finishShutdown(ctx)
}

func (a *pluginsActor) publish(ctx actor.Context, batch []*write) {
	a.committed = a.pending
	a.published.Swap(a.committed).supersede()
	// The slice goes to subscribers in batches: a fresh one per batch.
	events := make([]Event, 0, len(batch))
	for _, w := range batch {
		if w.event != nil {
			a.logEvent(w.event)
			events = append(events, w.event)
		}
	}
	if a.concurrent == 0 {
		// A lone caller: answering it first would only have it wait for
		// the actor again, sooner.
		a.sendEvents(ctx, events)
		a.replyAll(ctx, batch)
		return
	}
	// Concurrent callers are answered first, so that they write again
	// while the events go out, which makes the next batch larger. The
	// events go out as publish returns, also when answering panics (a
	// Metrics bug): the batch is committed.
	defer a.sendEvents(ctx, events)
	a.replyAll(ctx, batch)
}

// sendEvents hands a committed batch's events to the subscribers.
func (a *pluginsActor) sendEvents(ctx actor.Context, events []Event) {
	a.metrics.EventsSent(a.subs.publish(ctx, events))
}

// rollback resets the working tables to the last durable snapshot and
// re-applies the commands queued since the failed batch (failed) was cut.
// What those commands and the failed batch's did to gone is undone first,
// newest first, so that an allocation whose return was refused keeps its
// place in time for the next.
func (a *pluginsActor) rollback(ctx actor.Context, failed []*write) {
	for _, ws := range [][]*write{a.queue, failed} {
		for _, w := range slices.Backward(ws) {
			a.undoGone(w)
		}
	}
	a.tables = a.committed.tables.working()
	a.seq = a.committed.sequence
	clear(a.dirty)
	a.dirty = a.dirty[:0]
	queued := a.queue
	a.queue = nil
	for _, w := range queued {
		a.accept(ctx, w)
	}
}

// undoGone undoes what applying w did to gone.
func (a *pluginsActor) undoGone(w *write) {
	switch w.gone {
	case goneTaken:
		a.gone.rememberPlugin(w.plugin, w.goneOrder)
	case goneRemembered:
		a.gone.take(w.ptype, w.name, w.allocID)
	}
	w.gone = goneUntouched
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

func (a *pluginsActor) onSubscribe(ctx actor.Context, msg *messages.Subscribe, batched bool) {
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
	a.subs.add(ctx, msg.GetType(), sub, batched)
	a.metrics.Subscribers(a.subs.len())
	ack := &messages.Subscribed{Type: msg.GetType(), Sequence: a.committed.sequence}
	if msg.GetReplay() && !batched {
		ack.Current = a.committed.List(msg.GetType())
	}
	ctx.Send(sub, ack)
	if msg.GetReplay() && batched {
		ctx.Send(sub, &Events{Events: a.committed.replay(msg.GetType()), Replayed: true})
	}
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

// onShutdown takes the writes the facade's callers left before Shutdown
// closed the inbox, then answers the shutdown once they are durable.
func (a *pluginsActor) onShutdown(ctx actor.Context, msg *messages.ShutdownRegistry) {
	a.takeInbox(ctx)
	a.flush(ctx)
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

// eventSlabLen is how many events an eventSlab allocates at once.
const eventSlabLen = 8

// eventSlab hands out zeroed events from arrays of eventSlabLen: one
// allocation for the events of a batch or more instead of one an event,
// which was a tenth of the registry's allocations. The actor fills an
// event once, before sending it, and never writes it again. An event that
// a subscriber keeps keeps the other events of its array alive with it, at
// most eventSlabLen - 1 more; the actor keeps the array it hands out from
// alive until its next event.
type eventSlab[T any] struct{ free []T }

// next returns a zeroed event of the slab's own.
func (s *eventSlab[T]) next() *T {
	if len(s.free) == 0 {
		s.free = make([]T, eventSlabLen)
	}
	e := &s.free[0]
	s.free = s.free[1:]
	return e
}
