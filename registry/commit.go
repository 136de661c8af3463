package registry

import (
	"slices"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry/internal/table"
	"github.com/plugvisor/plugvisor/storage"
)

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
func (a *pluginsActor) putOp(al *table.Allocation, record []byte) storage.Op {
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
	return newSnapshot(a.tables.Cut(a.committed.tables), a.seq)
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
	a.tables = a.committed.tables.Working()
	a.seq = a.committed.sequence
	queued := a.queue
	a.queue = nil
	for _, w := range queued {
		a.accept(ctx, w)
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
