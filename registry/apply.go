package registry

import (
	"runtime"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry/internal/table"
	"github.com/plugvisor/plugvisor/storage"
)

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
		a.reply(ctx, w, errorf(ErrShutdown, "the write came while it was stopping"))
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
	if a.seq == table.MaxSequence {
		// Only a corrupt sequence record gets here: a write a
		// nanosecond would take 292 years.
		return errorf(ErrLimit, "the registry's sequence numbers are used up (the last, %d, is handed out): its state file's sequence record is likely corrupt; restore the file from a backup", uint64(table.MaxSequence))
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

func (a *pluginsActor) applyRegister(w *write) {
	p := w.plugin
	t := a.tables.Table(w.ptype)
	current, old := t.Find(p.GetName(), p.GetAllocId())
	hasCurrent, known := current != nil, old != nil
	if known && proto.Equal(old.Info(), p) {
		return // identical re-registration: nothing changes, nothing is said
	}
	if known {
		a.seq++
		a.tables.Changed(w.ptype, t)
		updated := w.keep(old.Order(), a.seq)
		t.Put(updated)
		w.event = &messages.PluginUpdated{Plugin: updated.Info(), Previous: old.Info(), IsCurrent: current.Order() == old.Order(), Sequence: a.seq}
		w.op = a.putOp(updated, w.record)
		return
	}
	if err := a.limits.checkRoom(w.ptype, t.Len()); err != nil {
		w.err = err
		return
	}
	a.seq++
	a.tables.Changed(w.ptype, t)
	order := a.seq
	if o, ok := a.gone.Take(w.ptype, p.GetName(), p.GetAllocId()); ok {
		order = o
		w.gone, w.goneOrder = goneTaken, o
	}
	added := w.keep(order, a.seq)
	p = added.Info()
	t.Add(added)
	w.op = a.putOp(added, w.record)
	if hasCurrent && current.Order() > order {
		w.event = &messages.PluginUpdated{Plugin: p, IsCurrent: false, Sequence: a.seq}
		return
	}
	event := a.registered.Next()
	event.Plugin, event.Sequence = p, a.seq
	if hasCurrent {
		event.Previous = current.Info()
	}
	w.event = event
}

func (a *pluginsActor) applyDeregister(w *write) {
	t, ok := a.tables.Lookup(w.ptype)
	var current, old *table.Allocation
	if ok {
		current, old = t.Find(w.name, w.allocID)
	}
	if old == nil {
		if !a.missingOK {
			w.err = errorf(ErrNotFound, "plugin %q of type %q has no allocation %q", w.name, w.ptype, w.allocID)
		}
		return
	}
	now, hasNow := t.Remove(old)
	a.gone.RememberPlugin(old.Info(), old.Order())
	w.gone = goneRemembered
	a.seq++
	a.tables.Changed(w.ptype, t)
	event := a.deregistered.Next()
	event.Plugin, event.CurrentChanged, event.Sequence = old.Info(), current.Order() == old.Order(), a.seq
	if hasNow {
		event.Current = now.Info()
	} else {
		event.Gone = true
	}
	w.event = event
	if a.memory == nil {
		w.op = deleteOp(old.Info())
	}
}

// undoGone undoes what applying w did to gone.
func (a *pluginsActor) undoGone(w *write) {
	switch w.gone {
	case goneTaken:
		a.gone.RememberPlugin(w.plugin, w.goneOrder)
	case goneRemembered:
		a.gone.Take(w.ptype, w.name, w.allocID)
	}
	w.gone = goneUntouched
}
