package registry

import (
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry/internal/gone"
	"github.com/plugvisor/plugvisor/registry/internal/slab"
	"github.com/plugvisor/plugvisor/registry/internal/table"
	"github.com/plugvisor/plugvisor/storage"
)

// pluginsActor owns every plugin's allocations: type → name → allocations,
// newest first. It is the only writer of that state. It promises that a
// write is answered only once durable. Only then does the write show in
// the published snapshot and in the events.
//
// Writes arrive from the facade's inbox, one drainInbox per batch, and as
// RegisterPlugin and DeregisterPlugin from actors. They go to disk in
// batches, as ARCHITECTURE.md's "Durability before acknowledgement (group
// commit)" says. The files of the actor are:
//   - apply.go: a command taken in and applied to the working tables;
//   - commit.go: the batch written, then published and answered;
//   - answer.go: the answers to the callers;
//   - subscribers.go: the events sent to the subscribers.
type pluginsActor struct {
	log       hclog.Logger
	writer    *storeWriter // nil with memory
	memory    *MemoryStore // Config.Memory: batches commit at once
	published *atomic.Pointer[Snapshot]
	metrics   Metrics
	missingOK bool // Config.DeregisterMissingIsNil
	limits    Limits

	tables    *table.Working // working state, durable or not
	gone      *gone.Set      // the order of recently deregistered allocations
	seq       uint64         // last sequence handed out
	committed *Snapshot      // last durable state, as published
	pending   *Snapshot      // state once the in-flight batch is durable

	// registered and deregistered hand out the events of registrations
	// and deregistrations, a few events to an allocation (see slab.Slab).
	registered   slab.Slab[messages.PluginRegistered]
	deregistered slab.Slab[messages.PluginDeregistered]

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

// newPluginsActor starts from the last published snapshot, the durable
// state, with working tables cloned from it. An actor restarted after a
// panic does the same. The writes the old instance had accepted but not
// yet answered are lost with it. Their callers get no answer: a facade
// caller gets a timeout error after Config.RequestTimeout.
func newPluginsActor(cfg Config, published *atomic.Pointer[Snapshot], writer *storeWriter, in *inbox, subs *subscribers) *pluginsActor {
	committed := published.Load()
	tables := committed.tables.Working()
	return &pluginsActor{
		log:       cfg.Logger,
		writer:    writer,
		memory:    cfg.Memory,
		published: published,
		metrics:   cfg.Metrics,
		missingOK: cfg.DeregisterMissingIsNil,
		limits:    cfg.Limits,
		tables:    tables,
		gone:      gone.New(),
		seq:       committed.sequence,
		committed: committed,
		in:        in,
		subs:      subs,
	}
}

// Receive handles the registry's lifecycle, commands and internal
// messages, in that order. It logs a panic's stack itself
// (actors.LogPanic) rather than through actors.PanicStack, whose
// middleware costs every message an envelope.
func (a *pluginsActor) Receive(ctx actor.Context) {
	defer actors.LogPanic(a.log, ctx)
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		a.onStarted(ctx)
	case *actor.Stopped:
		a.onStopped(ctx)
	case *messages.RegisterPlugin:
		a.onCommand(ctx, &write{plugin: msg.GetPlugin(), replyTo: msg.GetReplyTo()})
	case *messages.DeregisterPlugin:
		a.onCommand(ctx, &write{deregister: true, ptype: msg.GetType(), name: msg.GetName(),
			allocID: msg.GetAllocId(), replyTo: msg.GetReplyTo()})
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
	case *messages.ShutdownRegistry:
		a.onShutdown(ctx, msg)
	case drainInbox:
		a.onDrainInbox(ctx)
	case flushQueued:
		a.noted = false
		a.flush(ctx)
	case *batchWritten:
		a.onBatchWritten(ctx, msg)
	case *actor.Terminated:
		a.subs.drop(msg.GetWho())
		a.metrics.Subscribers(a.subs.len())
	}
}

// onStarted takes the inbox. After a restart, it may hold writes whose
// wake-up the old instance took with it.
func (a *pluginsActor) onStarted(ctx actor.Context) {
	a.takeInbox(ctx)
	a.flush(ctx)
}

// onStopped refuses the writes that will never be written: those queued,
// and those the facade's callers left or will leave in the inbox. Writes
// of a batch in flight may be durable or not: their callers time out.
func (a *pluginsActor) onStopped(ctx actor.Context) {
	a.in.close()
	err := errorf(ErrShutdown, "its actor stopped before it took the write")
	for _, w := range append(a.queue, a.in.take()...) {
		a.reply(ctx, w, err)
	}
	a.queue = nil
	a.subs.endSinks()
	if a.stopped != nil {
		a.stopped()
	}
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
