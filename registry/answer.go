package registry

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/plugvisor/plugvisor/messages"
)

// reply answers w with err. The actor answers each write once, by reply
// or replyAll, and keeps no pointer to it afterwards (recycle clears a
// batch): an answered facade call's write goes back to the pool
// (write.wait) and may be a later caller's, whom a second answer would
// reach.
func (a *pluginsActor) reply(ctx actor.Context, w *write, err error) {
	a.measure(w, err, time.Now())
	if w.done != nil {
		a.in.claim(w)
	}
	a.send(ctx, w, err)
}

// replyAll answers each write of a batch with its own error: first the
// metrics, which may panic (a call not yet claimed then times out, where a
// claimed one would wait for ever), then one claim for the batch, then
// the answers. One clock read times the whole batch.
func (a *pluginsActor) replyAll(ctx actor.Context, batch []*write) {
	now := time.Now()
	for _, w := range batch {
		a.measure(w, w.err, now)
	}
	a.in.claim(batch...)
	for _, w := range batch {
		a.send(ctx, w, w.err)
	}
}

// measure reports w, answered at now, to the metrics. A write answered
// without being taken from the inbox (refused at shutdown) took no time at
// the actor.
func (a *pluginsActor) measure(w *write, err error, now time.Time) {
	op := "register"
	if w.deregister {
		op = "deregister"
	}
	var took time.Duration
	if !w.arrived.IsZero() {
		took = now.Sub(w.arrived)
	}
	a.metrics.Write(op, err, took)
}

// send answers w, unless it is a facade call that the sweep has ended
// (inbox.tick): its caller has gone. A claimed call's reply channel is
// empty, and the answer always fits.
func (a *pluginsActor) send(ctx actor.Context, w *write, err error) {
	switch {
	case w.done != nil:
		if w.claimed {
			w.done <- err
		}
	case w.replyTo == nil:
	case w.deregister:
		ctx.Send(w.replyTo, &messages.DeregisterPluginResponse{Error: messages.ErrorToProto(err)})
	default:
		ctx.Send(w.replyTo, &messages.RegisterPluginResponse{Error: messages.ErrorToProto(err)})
	}
}
