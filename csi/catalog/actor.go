package catalog

import (
	"cmp"
	"errors"
	"maps"
	"slices"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/names"
	"github.com/plugvisor/plugvisor/storage"
)

// catalogActor owns the CSI catalog of this node: the volumes with their
// claims, the plugins with the fingerprints of their instances and their
// health counts, and the index counter, which only grows. It is the only
// writer of that state; it answers a write only once durable and a query
// from the last durable state, and takes the CSI manager's fingerprints in
// the order they come (see ARCHITECTURE.md, "Catalog" and "Durability
// before acknowledgement").
type catalogActor struct {
	log     hclog.Logger
	bucket  storage.Bucket
	nodeID  string
	manager *actor.PID
	// maxVolumes bounds the volumes a registration may bring the catalog to.
	maxVolumes int
	// durable is the last durable state, kept outside the actor so that a
	// restart after a panic resumes from it.
	durable *atomic.Pointer[catalogState]

	state     *catalogState // working state, durable or not
	committed *catalogState // last durable state: what queries see
	pending   *catalogState // state once the batch in flight is durable

	queue    []*catalogWrite // accepted, waiting for the next batch
	inflight []*catalogWrite // being written; nil when no batch is in flight

	closing  bool
	shutdown []*actor.PID // who waits for ShutdownCatalogResponse

	// cluster is the part of cluster mode (see cluster.go); nil without a Fleet.
	cluster *fleetState
}

// catalogWrite is one accepted write on its way to disk.
type catalogWrite struct {
	// cmd is a messages.CatalogWrite, or a CSIPluginFingerprinted, which
	// nobody waits for.
	cmd     proto.Message
	replyTo *actor.PID
	volume  *model.CSIVolume // the volume the answer carries
	// volumes are the volumes a RegisterVolumes answer carries.
	volumes []*model.CSIVolume
	// plugin is the plugin an ExpectPlugin answer carries: nil when the
	// write left none.
	plugin *model.CSIPlugin
	ops    []storage.Op
	err    error // a refusal decided against the working state
}

// catalogBatchWritten is sent to the catalog by the goroutine that wrote a batch.
type catalogBatchWritten struct{ err error }

func newCatalogActor(cfg Config, durable *atomic.Pointer[catalogState]) *catalogActor {
	committed := durable.Load()
	a := &catalogActor{
		log:        cfg.Logger,
		bucket:     cfg.Bucket,
		nodeID:     cfg.NodeID,
		manager:    cfg.Manager,
		maxVolumes: cfg.MaxVolumes,
		durable:    durable,
		state:      committed.clone(),
		committed:  committed,
	}
	if cfg.Fleet != nil {
		a.cluster = newFleetState(cfg.Fleet)
	}
	return a
}

// Receive handles the catalog's lifecycle, commands, queries and internal
// results, in that order. Every write is one case: a
// messages.CatalogWrite, applied in order and answered once durable.
func (a *catalogActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		a.onStarted(ctx)
	case *actor.Stopped:
		a.onStopped()
	case *messages.ShutdownCatalog:
		a.onShutdown(ctx, msg)
	case messages.CatalogWrite:
		a.onWrite(ctx, msg, msg.GetReplyTo())
	case *messages.CSIPluginFingerprinted:
		a.onFingerprinted(ctx, msg)
	case *messages.CSIPluginHealthChanged, *messages.CSIPluginFailed:
		// The fingerprint that goes with each says the same.
	case *messages.ListVolumesRequest:
		a.onListVolumes(ctx, msg)
	case *messages.GetVolumeRequest:
		a.onGetVolume(ctx, msg)
	case *messages.ListCatalogPluginsRequest:
		a.onListPlugins(ctx, msg)
	case *catalogBatchWritten:
		a.onBatchWritten(ctx, msg)
	case *fleetAnswered:
		a.onFleetAnswered(ctx, msg)
	case *fleetFingerprintsPut:
		a.onFleetFingerprintsPut(ctx, msg)
	case *actor.Terminated:
		a.log.Warn("the CSI manager stopped: plugin health stays as last fingerprinted", "manager", msg.GetWho())
	}
}

func (a *catalogActor) onStarted(ctx actor.Context) {
	if a.manager == nil {
		return
	}
	ctx.Watch(a.manager)
	ctx.Send(a.manager, &messages.SubscribeCSI{Subscriber: ctx.Self(), Replay: true})
}

// onStopped cancels the Fleet calls in flight, in cluster mode.
func (a *catalogActor) onStopped() {
	if a.cluster != nil {
		a.cluster.cancel()
	}
}

// onWrite takes a write: a messages.CatalogWrite from a caller, or a
// fingerprint from the CSI manager.
func (a *catalogActor) onWrite(ctx actor.Context, cmd proto.Message, replyTo *actor.PID) {
	if a.cluster != nil {
		if err := a.topologyRefusal(cmd); err != nil {
			a.fleetReply(ctx, cmp.Or(replyTo, ctx.Sender()), fleetResponse(cmd, nil, err))
			return
		}
		if a.deferToFleet(ctx, cmd, replyTo) {
			return
		}
	}
	w := &catalogWrite{cmd: cmd, replyTo: cmp.Or(replyTo, ctx.Sender())}
	if a.closing {
		a.reply(ctx, w, model.Refusef(ErrShutdown, "the request came while it was stopping"))
		return
	}
	a.enqueue(ctx, w)
	a.flush(ctx)
}

// onFingerprinted records a fingerprint of this node's CSI manager and,
// in cluster mode, forwards it to the Fleet.
func (a *catalogActor) onFingerprinted(ctx actor.Context, msg *messages.CSIPluginFingerprinted) {
	a.onWrite(ctx, msg, nil)
	if a.cluster != nil {
		a.forwardFingerprint(ctx, msg.GetFingerprint())
	}
}

// enqueue applies w to the working state and queues it for the next batch,
// or answers it at once when it is bad on its face.
func (a *catalogActor) enqueue(ctx actor.Context, w *catalogWrite) {
	if err := a.apply(w); err != nil {
		a.reply(ctx, w, err)
		return
	}
	a.queue = append(a.queue, w)
}

// apply runs a write against the working state. It returns an error only
// for input that is bad on its face; refusals that depend on the state are
// kept in w.err. Either way nothing changes.
func (a *catalogActor) apply(w *catalogWrite) error {
	w.volume, w.volumes, w.plugin, w.ops, w.err = nil, nil, nil, nil, nil
	var change catalogChange
	var err error
	switch cmd := w.cmd.(type) {
	case *messages.RegisterVolume:
		change, err = a.applyRegister(w, cmd)
	case *messages.DeregisterVolume:
		change, err = a.applyDeregister(w, cmd)
	case *messages.RegisterVolumes:
		change, err = a.applyRegisterBatch(w, cmd)
	case *messages.DeregisterVolumes:
		change, err = a.applyDeregisterBatch(w, cmd)
	case *messages.ClaimVolume:
		change, err = a.applyClaim(w, cmd)
	case *messages.ReleaseVolume:
		change, err = a.applyRelease(w, cmd)
	case *messages.MarkVolumeDeleting:
		change, err = a.applyMarkDeleting(w, cmd)
	case *messages.RecordVolumeCapacity:
		change, err = a.applyRecordCapacity(w, cmd)
	case *messages.RecordVolumeModify:
		change, err = a.applyRecordModify(w, cmd)
	case *messages.CSIPluginFingerprinted:
		change, err = a.applyFingerprint(cmd.GetFingerprint())
	case *messages.ExpectPlugin:
		change, err = a.applyExpect(cmd)
		defer func() { w.plugin = a.state.plugins[cmd.GetPluginId()] }()
	}
	if err != nil || w.err != nil {
		return err
	}
	w.ops, err = a.state.commit(change)
	return err
}

// flush starts writing the queued writes as one batch, unless a batch is
// already in flight; then they wait for it and go in the next one.
func (a *catalogActor) flush(ctx actor.Context) {
	if a.inflight != nil || len(a.queue) == 0 {
		return
	}
	a.inflight, a.queue = a.queue, nil
	a.pending = a.state.clone()
	var ops []storage.Op
	for _, w := range a.inflight {
		ops = append(ops, w.ops...)
	}
	if len(ops) == 0 {
		a.onBatchWritten(ctx, &catalogBatchWritten{})
		return
	}
	ops = append(ops, catalogIndexOp(a.pending.index))
	bucket, root, self := a.bucket, ctx.ActorSystem().Root, ctx.Self()
	go func() { root.Send(self, &catalogBatchWritten{err: bucket.Apply(ops)}) }()
}

func (a *catalogActor) onBatchWritten(ctx actor.Context, msg *catalogBatchWritten) {
	batch := a.inflight
	if batch == nil {
		// The batch of an instance that panicked: its writes were lost
		// with it, and this instance resumed from the last durable state.
		a.log.Warn("ignoring the result of a batch from before a restart", "error", msg.err)
		return
	}
	a.inflight = nil
	if msg.err != nil {
		a.log.Error("durable write failed: refusing the batch and rolling back", "writes", len(batch), "error", msg.err)
		err := model.Refusef(model.ErrStore, "%v", msg.err)
		for _, w := range batch {
			a.reply(ctx, w, err)
		}
		a.rollback(ctx)
	} else {
		a.committed = a.pending
		a.durable.Store(a.committed)
		for _, w := range batch {
			a.reply(ctx, w, w.err)
		}
	}
	a.pending = nil
	a.flush(ctx)
	a.finishShutdown(ctx)
}

// rollback resets the working state to the last durable one and applies
// again the writes queued since the failed batch was cut.
func (a *catalogActor) rollback(ctx actor.Context) {
	a.state = a.committed.clone()
	queued := a.queue
	a.queue = nil
	for _, w := range queued {
		a.enqueue(ctx, w)
	}
}

// reply answers a write with err, or with its volume when err is nil, and
// logs what a durable write did.
func (a *catalogActor) reply(ctx actor.Context, w *catalogWrite, err error) {
	var volume *messages.CatalogVolume
	if err == nil && w.volume != nil {
		volume = w.volume.Proto()
	}
	answer := messages.ErrorToProto(err)
	var resp proto.Message
	switch cmd := w.cmd.(type) {
	case *messages.RegisterVolume:
		resp = &messages.RegisterVolumeResponse{Error: answer, Volume: volume}
	case *messages.DeregisterVolume:
		resp = &messages.DeregisterVolumeResponse{Error: answer}
	case *messages.RegisterVolumes:
		resp = registerVolumesResponse(w.volumes, err)
	case *messages.DeregisterVolumes:
		resp = &messages.DeregisterVolumesResponse{Error: answer}
	case *messages.ClaimVolume:
		resp = &messages.ClaimVolumeResponse{Error: answer, Volume: volume}
	case *messages.ReleaseVolume:
		resp = &messages.ReleaseVolumeResponse{Error: answer, Volume: volume}
	case *messages.MarkVolumeDeleting:
		resp = &messages.MarkVolumeDeletingResponse{Error: answer, Volume: volume}
	case *messages.RecordVolumeCapacity:
		resp = &messages.RecordVolumeCapacityResponse{Error: answer, Volume: volume}
	case *messages.RecordVolumeModify:
		resp = &messages.RecordVolumeModifyResponse{Error: answer, Volume: volume}
	case *messages.ExpectPlugin:
		expected := &messages.ExpectPluginResponse{Error: answer}
		if err == nil && w.plugin != nil {
			expected.Plugin = w.plugin.Proto()
		}
		resp = expected
	case *messages.CSIPluginFingerprinted:
		fp := cmd.GetFingerprint()
		switch {
		case errors.Is(err, ErrShutdown):
		case err != nil:
			a.log.Warn("fingerprint not recorded", "type", fp.GetType(), "plugin", fp.GetName(), "alloc", fp.GetAllocId(), "error", err)
		case len(w.ops) > 0:
			a.log.Debug("plugin fingerprinted", "type", fp.GetType(), "plugin", fp.GetName(), "alloc", fp.GetAllocId(), "healthy", fp.GetHealthy())
		}
		return
	}
	if err == nil && len(w.ops) > 0 {
		a.log.Info("catalog changed", "command", string(w.cmd.ProtoReflect().Descriptor().Name()), "index", a.committed.index)
	}
	a.answer(ctx, w.replyTo, resp)
}

// answer sends resp to replyTo, or to the sender when replyTo is nil.
func (a *catalogActor) answer(ctx actor.Context, replyTo *actor.PID, resp proto.Message) {
	if replyTo = cmp.Or(replyTo, ctx.Sender()); replyTo != nil {
		ctx.Send(replyTo, resp)
	}
}

func (a *catalogActor) onListVolumes(ctx actor.Context, msg *messages.ListVolumesRequest) {
	if a.cluster != nil && a.deferToFleet(ctx, msg, msg.GetReplyTo()) {
		return
	}
	resp := &messages.ListVolumesResponse{}
	if ns := msg.GetNamespace(); ns != "" {
		if err := names.Check("namespace", ns); err != nil {
			resp.Error = messages.ErrorToProto(model.Refusal(model.ErrInvalid, err))
		}
	}
	for _, key := range a.committed.sortedVolumeKeys() {
		if resp.Error == nil && (msg.GetNamespace() == "" || msg.GetNamespace() == key.namespace) {
			resp.Volumes = append(resp.Volumes, a.committed.volumes[key].StubProto())
		}
	}
	a.answer(ctx, msg.GetReplyTo(), resp)
}

func (a *catalogActor) onGetVolume(ctx actor.Context, msg *messages.GetVolumeRequest) {
	if a.cluster != nil && a.deferToFleet(ctx, msg, msg.GetReplyTo()) {
		return
	}
	resp := &messages.GetVolumeResponse{}
	key, err := catalogVolumeKey(msg.GetNamespace(), msg.GetVolumeId())
	if err == nil {
		var v *model.CSIVolume
		if v, err = a.committed.volume(key); err == nil {
			resp.Volume = v.Proto()
		}
	}
	resp.Error = messages.ErrorToProto(err)
	a.answer(ctx, msg.GetReplyTo(), resp)
}

func (a *catalogActor) onListPlugins(ctx actor.Context, msg *messages.ListCatalogPluginsRequest) {
	if a.cluster != nil && a.deferToFleet(ctx, msg, msg.GetReplyTo()) {
		return
	}
	resp := &messages.ListCatalogPluginsResponse{}
	for _, id := range slices.Sorted(maps.Keys(a.committed.plugins)) {
		resp.Plugins = append(resp.Plugins, a.committed.plugins[id].Proto())
	}
	a.answer(ctx, msg.GetReplyTo(), resp)
}

func (a *catalogActor) onShutdown(ctx actor.Context, msg *messages.ShutdownCatalog) {
	if !a.closing && a.manager != nil {
		// The manager, stopped after the catalog, would tell a stopped
		// actor that it stopped.
		ctx.Unwatch(a.manager)
	}
	a.closing = true
	if replyTo := cmp.Or(msg.GetReplyTo(), ctx.Sender()); replyTo != nil {
		a.shutdown = append(a.shutdown, replyTo)
	}
	a.finishShutdown(ctx)
}

// finishShutdown answers the shutdown once every accepted write is durable.
func (a *catalogActor) finishShutdown(ctx actor.Context) {
	if !a.closing || a.inflight != nil || len(a.queue) > 0 || a.cluster != nil && a.cluster.calls > 0 {
		return
	}
	for _, pid := range a.shutdown {
		ctx.Send(pid, &messages.ShutdownCatalogResponse{})
	}
	a.shutdown = nil
}
