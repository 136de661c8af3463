package catalog

import (
	"cmp"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/names"
	"github.com/plugvisor/plugvisor/storage"
)

// catalogActor owns the CSI catalog of this node: the volumes with their
// claims, the plugins with the fingerprints of their instances and their
// health counts, and the index counter. It is the only writer of that state.
//
// Fed by the CSI manager: at start it subscribes with replay, and each
// CSIPluginFingerprinted becomes CSIPlugin.AddPlugin under the catalog's
// node ID. The manager's word is taken in the order it comes: the latest
// fingerprint of a plugin's controller (or node) service on this node
// replaces the one before, whatever its alloc, and a final unhealthy
// fingerprint counts as unhealthy; but the final fingerprint of an alloc
// that another one has replaced on the node is ignored (the manager
// publishes it too, possibly after the new instance's first). Every
// volume's health follows its plugin's counts (a volume whose plugin was
// never seen is unschedulable).
//
// Writes (RegisterVolume, DeregisterVolume, ClaimVolume, ReleaseVolume,
// MarkVolumeDeleting, RecordVolumeCapacity, fingerprints) are applied at
// once to the working state, so the next command sees them, and written
// to the store in batches: one batch in flight, off the actor's goroutine,
// while the next commands queue up for the one after (group commit, as the
// registry does). A write is answered only once its batch is durable, in
// the order the writes came. A refusal that is bad on its face is answered
// at once; one that depends on the state is answered in order with the
// writes. Queries are answered at once
// from the last durable state, so they never show a change that might
// still be lost. If the store fails, the batch's writes are answered
// ErrCatalogStore and the working state rolls back to the last durable one,
// with the writes queued since applied again; fingerprints in the failed
// batch are lost until the plugin's next fingerprint or the next start.
//
// Indexes only grow: every write that changes anything takes the next
// index, which becomes the ModifyIndex of all it changes (and the
// CreateIndex of what it creates), and the counter is kept on disk.
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
}

// catalogWrite is one accepted write on its way to disk.
type catalogWrite struct {
	// cmd is a RegisterVolume, DeregisterVolume, ClaimVolume, ReleaseVolume
	// or CSIPluginFingerprinted (which nobody waits for).
	cmd     proto.Message
	replyTo *actor.PID
	volume  *model.CSIVolume // the volume the answer carries
	ops     []storage.Op
	err     error // a refusal decided against the working state
}

// catalogBatchWritten is sent to the catalog by the goroutine that wrote a batch.
type catalogBatchWritten struct{ err error }

func newCatalogActor(cfg CatalogConfig, durable *atomic.Pointer[catalogState]) *catalogActor {
	committed := durable.Load()
	return &catalogActor{
		log:        cfg.Logger,
		bucket:     cfg.Bucket,
		nodeID:     cfg.NodeID,
		manager:    cfg.Manager,
		maxVolumes: cfg.MaxVolumes,
		durable:    durable,
		state:      committed.clone(),
		committed:  committed,
	}
}

// Receive handles the catalog's commands, queries, fingerprints and
// internal results.
func (a *catalogActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		a.onStarted(ctx)
	case *messages.RegisterVolume:
		a.onWrite(ctx, msg, msg.GetReplyTo())
	case *messages.DeregisterVolume:
		a.onWrite(ctx, msg, msg.GetReplyTo())
	case *messages.ClaimVolume:
		a.onWrite(ctx, msg, msg.GetReplyTo())
	case *messages.ReleaseVolume:
		a.onWrite(ctx, msg, msg.GetReplyTo())
	case *messages.MarkVolumeDeleting:
		a.onWrite(ctx, msg, msg.GetReplyTo())
	case *messages.RecordVolumeCapacity:
		a.onWrite(ctx, msg, msg.GetReplyTo())
	case *messages.CSIPluginFingerprinted:
		a.onWrite(ctx, msg, nil)
	case *messages.CSIPluginHealthChanged, *messages.CSIPluginFailed:
		// The fingerprint that goes with each says the same.
	case *catalogBatchWritten:
		a.onBatchWritten(ctx, msg)
	case *messages.ListVolumesRequest:
		a.onListVolumes(ctx, msg)
	case *messages.GetVolumeRequest:
		a.onGetVolume(ctx, msg)
	case *messages.ListCatalogPluginsRequest:
		a.onListPlugins(ctx, msg)
	case *actor.Terminated:
		a.log.Warn("the CSI manager stopped: plugin health stays as last fingerprinted", "manager", msg.GetWho())
	case *messages.ShutdownCatalog:
		a.onShutdown(ctx, msg)
	}
}

func (a *catalogActor) onStarted(ctx actor.Context) {
	if a.manager == nil {
		return
	}
	ctx.Watch(a.manager)
	ctx.Send(a.manager, &messages.SubscribeCSI{Subscriber: ctx.Self(), Replay: true})
}

func (a *catalogActor) onWrite(ctx actor.Context, cmd proto.Message, replyTo *actor.PID) {
	w := &catalogWrite{cmd: cmd, replyTo: cmp.Or(replyTo, ctx.Sender())}
	if a.closing {
		a.reply(ctx, w, catalogErrorf(ErrCatalogShutdown, "the catalog is shutting down"))
		return
	}
	a.enqueue(ctx, w)
	a.flush(ctx)
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
	w.volume, w.ops, w.err = nil, nil, nil
	var change catalogChange
	var err error
	switch cmd := w.cmd.(type) {
	case *messages.RegisterVolume:
		change, err = a.applyRegister(w, cmd)
	case *messages.DeregisterVolume:
		change, err = a.applyDeregister(w, cmd)
	case *messages.ClaimVolume:
		change, err = a.applyClaim(w, cmd)
	case *messages.ReleaseVolume:
		change, err = a.applyRelease(w, cmd)
	case *messages.MarkVolumeDeleting:
		change, err = a.applyMarkDeleting(w, cmd)
	case *messages.RecordVolumeCapacity:
		change, err = a.applyRecordCapacity(w, cmd)
	case *messages.CSIPluginFingerprinted:
		change, err = a.applyFingerprint(cmd.GetFingerprint())
	}
	if err != nil || w.err != nil {
		return err
	}
	w.ops, err = a.state.commit(change)
	return err
}

func (a *catalogActor) applyRegister(w *catalogWrite, cmd *messages.RegisterVolume) (catalogChange, error) {
	var change catalogChange
	v := model.VolumeFromProto(cmd.GetVolume())
	v.Namespace = cmp.Or(v.Namespace, model.DefaultNamespace)
	key, err := catalogVolumeKey(v.Namespace, v.ID)
	if err == nil {
		err = checkRegistration(v)
	}
	if err != nil {
		return change, err
	}
	v.ExternalID, v.Deleting = v.PluginVolumeID(), false
	old := a.state.volumes[key]
	if w.err = a.state.checkRoom(key, a.maxVolumes); w.err != nil {
		return change, nil
	}
	switch {
	case old != nil && old.Deleting:
		w.err = deletingError(key)
		return change, nil
	case createdConflict(w, key, old, v), a.externalIDTaken(w, key, v):
		return change, nil
	case old.Equal(v):
		w.volume = old // the same description again: nothing changes
		return change, nil
	case old != nil && old.InUse():
		w.err = catalogErrorf(ErrVolumeInUse, "volume %s is claimed by allocs %s: its description cannot change until they release it",
			key, claimants(old))
		return change, nil
	}
	v.CreateIndex, v.ModifyIndex, v.ResourceExhausted = 0, 0, time.Time{}
	if old != nil {
		v.CreateIndex, v.ResourceExhausted = old.CreateIndex, old.ResourceExhausted
	}
	v.Health = model.PluginHealth(a.state.plugins[v.PluginID])
	change.putVolume(key, v)
	w.volume = v
	return change, nil
}

// checkRegistration checks the description of a volume to register: safe
// IDs, known modes, well-formed topologies, and no claims.
func checkRegistration(v *model.CSIVolume) error {
	if err := names.Check("plugin ID", v.PluginID); err != nil {
		return catalogWrap(ErrCatalogInvalid, err)
	}
	if v.InUse() || len(v.PastClaims) > 0 {
		return catalogErrorf(ErrCatalogInvalid, "volume %q: a registration carries no claims (allocs claim with ClaimVolume)", v.ID)
	}
	if err := v.Validate(); err != nil {
		return catalogWrap(ErrCatalogInvalid, err)
	}
	return nil
}

// claimants lists, sorted, the allocs that hold claims on v.
func claimants(v *model.CSIVolume) string {
	allocs := slices.Concat(slices.Collect(maps.Keys(v.ReadClaims)), slices.Collect(maps.Keys(v.WriteClaims)))
	slices.Sort(allocs)
	return strings.Join(allocs, ", ")
}

func (a *catalogActor) applyDeregister(w *catalogWrite, cmd *messages.DeregisterVolume) (catalogChange, error) {
	var change catalogChange
	key, err := catalogVolumeKey(cmd.GetNamespace(), cmd.GetVolumeId())
	if err != nil {
		return change, err
	}
	v, err := a.state.volume(key)
	switch {
	case err != nil:
		w.err = err
	case v.InUse():
		w.err = catalogErrorf(ErrVolumeInUse, "volume %s is claimed by allocs %s: they must release it before it is deregistered",
			key, claimants(v))
	default:
		change.putVolume(key, nil)
	}
	return change, nil
}

func (a *catalogActor) applyClaim(w *catalogWrite, cmd *messages.ClaimVolume) (catalogChange, error) {
	var change catalogChange
	key, err := catalogVolumeKey(cmd.GetNamespace(), cmd.GetVolumeId())
	claim := &model.Claim{
		AllocID: cmd.GetAllocId(),
		NodeID:  cmp.Or(cmd.GetNodeId(), a.nodeID),
		Mode:    model.ClaimMode(cmd.GetMode()),
		State:   model.ClaimStateTaken,
	}
	if err := cmp.Or(err, checkClaim(claim), checkUsage(cmd)); err != nil {
		return change, err
	}
	v, err := a.state.volume(key)
	if err == nil {
		err = usageConflict(v, cmd)
	}
	if err == nil && v.Deleting {
		err = deletingError(key)
	}
	if err != nil {
		w.err = err
		return change, nil
	}
	return a.changeClaims(w, key, v, func(v *model.CSIVolume) error { return v.Claim(claim) }), nil
}

// checkClaim checks a claim's alloc, node and mode on their face.
func checkClaim(c *model.Claim) error {
	if err := cmp.Or(names.Check("alloc ID", c.AllocID), names.Check("node ID", c.NodeID)); err != nil {
		return catalogWrap(ErrCatalogInvalid, err)
	}
	if err := cmp.Or(c.Mode.Validate(), c.State.Validate()); err != nil {
		return catalogWrap(ErrCatalogInvalid, err)
	}
	return nil
}

// checkUsage checks the plugin and modes a claim says it uses, where it
// says any.
func checkUsage(cmd *messages.ClaimVolume) error {
	var problems []error
	if cmd.GetPluginId() != "" {
		problems = append(problems, names.Check("plugin ID", cmd.GetPluginId()))
	}
	if cmd.GetAccessMode() != "" {
		problems = append(problems, model.AccessMode(cmd.GetAccessMode()).Validate())
	}
	if cmd.GetAttachmentMode() != "" {
		problems = append(problems, model.AttachmentMode(cmd.GetAttachmentMode()).Validate())
	}
	if err := cmp.Or(problems...); err != nil {
		return catalogWrap(ErrCatalogInvalid, err)
	}
	return nil
}

// usageConflict refuses a claim that reaches v through another plugin, or
// asks for other modes than v's.
func usageConflict(v *model.CSIVolume, cmd *messages.ClaimVolume) error {
	if cmp.Or(cmd.GetPluginId(), v.PluginID) == v.PluginID &&
		cmp.Or(cmd.GetAccessMode(), string(v.AccessMode)) == string(v.AccessMode) &&
		cmp.Or(cmd.GetAttachmentMode(), string(v.AttachmentMode)) == string(v.AttachmentMode) {
		return nil
	}
	return catalogErrorf(csi.ErrClaimRefused, "volume %q in namespace %q is served by plugin %q as %s %s; alloc %s asked for it through plugin %q as %s %s",
		v.ID, v.Namespace, v.PluginID, v.AttachmentMode, v.AccessMode,
		cmd.GetAllocId(), cmd.GetPluginId(), cmd.GetAttachmentMode(), cmd.GetAccessMode())
}

func (a *catalogActor) applyRelease(w *catalogWrite, cmd *messages.ReleaseVolume) (catalogChange, error) {
	var change catalogChange
	key, err := catalogVolumeKey(cmd.GetNamespace(), cmd.GetVolumeId())
	claim := &model.Claim{
		AllocID: cmd.GetAllocId(),
		NodeID:  a.nodeID,
		Mode:    model.ClaimModeRead,
		State:   model.ClaimState(cmp.Or(cmd.GetState(), string(model.ClaimStateReadyToFree))),
	}
	if err := cmp.Or(err, checkClaim(claim)); err != nil {
		return change, err
	}
	if claim.State == model.ClaimStateTaken {
		return change, catalogErrorf(ErrCatalogInvalid, "release of alloc %s: state %q takes a claim; releasing needs a later state",
			claim.AllocID, claim.State)
	}
	v, err := a.state.volume(key)
	if err != nil {
		w.err = err
		return change, nil
	}
	held := v.WriteClaims[claim.AllocID]
	if held == nil {
		held = v.ReadClaims[claim.AllocID]
	}
	if held != nil {
		claim.NodeID, claim.Mode = held.NodeID, held.Mode
	}
	return a.changeClaims(w, key, v, func(v *model.CSIVolume) error { return v.ClaimRelease(claim) }), nil
}

// changeClaims runs a claim operation on a copy of v and returns the change
// it makes: none when it is refused (w.err says why) or changes no claim.
func (a *catalogActor) changeClaims(w *catalogWrite, key volumeKey, v *model.CSIVolume, op func(*model.CSIVolume) error) catalogChange {
	var change catalogChange
	changed := v.Copy()
	if err := op(changed); err != nil {
		w.err = catalogModelError(err)
		return change
	}
	if reflect.DeepEqual(
		[]map[string]*model.Claim{v.ReadClaims, v.WriteClaims, v.PastClaims},
		[]map[string]*model.Claim{changed.ReadClaims, changed.WriteClaims, changed.PastClaims}) {
		w.volume = v
		return change
	}
	change.putVolume(key, changed)
	w.volume = changed
	return change
}

func (a *catalogActor) applyFingerprint(fp *messages.CSIFingerprint) (catalogChange, error) {
	var change catalogChange
	info, err := model.InstanceFromFingerprint(fp)
	if err == nil {
		err = names.Check("plugin name", info.PluginID)
	}
	if err != nil {
		return change, catalogWrap(ErrCatalogInvalid, err)
	}
	old := a.state.plugins[info.PluginID]
	if lateWord(old, a.nodeID, info) {
		return change, nil
	}
	p := old.Copy()
	if p == nil {
		p = model.NewCSIPlugin(info.PluginID, 0)
	}
	if err := p.AddPlugin(a.nodeID, info); err != nil {
		return change, catalogWrap(ErrCatalogInvalid, err)
	}
	if reflect.DeepEqual(old, p) {
		return change, nil // the same fingerprint again
	}
	change.plugins = []*model.CSIPlugin{p}
	change.followHealth(a.state)
	return change, nil
}

// lateWord reports whether info is the final fingerprint of an instance
// that another alloc has replaced on nodeID: the manager publishes it after
// the new instance may have spoken, and it must not hide the new one.
func lateWord(p *model.CSIPlugin, nodeID string, info *model.CSIInfo) bool {
	if p == nil || info.Healthy || info.HealthDescription != csi.StoppedDescription {
		return false
	}
	entries := p.Nodes
	if info.ControllerInfo != nil {
		entries = p.Controllers
	}
	current, ok := entries[nodeID]
	return ok && current.AllocID != info.AllocID
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
		err := catalogErrorf(ErrCatalogStore, "%v", msg.err)
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
	answer := catalogErrorToProto(err)
	var resp proto.Message
	switch cmd := w.cmd.(type) {
	case *messages.RegisterVolume:
		resp = &messages.RegisterVolumeResponse{Error: answer, Volume: volume}
	case *messages.DeregisterVolume:
		resp = &messages.DeregisterVolumeResponse{Error: answer}
	case *messages.ClaimVolume:
		resp = &messages.ClaimVolumeResponse{Error: answer, Volume: volume}
	case *messages.ReleaseVolume:
		resp = &messages.ReleaseVolumeResponse{Error: answer, Volume: volume}
	case *messages.MarkVolumeDeleting:
		resp = &messages.MarkVolumeDeletingResponse{Error: answer, Volume: volume}
	case *messages.RecordVolumeCapacity:
		resp = &messages.RecordVolumeCapacityResponse{Error: answer, Volume: volume}
	case *messages.CSIPluginFingerprinted:
		fp := cmd.GetFingerprint()
		switch {
		case errors.Is(err, ErrCatalogShutdown):
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
	resp := &messages.ListVolumesResponse{}
	if ns := msg.GetNamespace(); ns != "" {
		if err := names.Check("namespace", ns); err != nil {
			resp.Error = catalogErrorToProto(catalogWrap(ErrCatalogInvalid, err))
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
	resp := &messages.GetVolumeResponse{}
	key, err := catalogVolumeKey(msg.GetNamespace(), msg.GetVolumeId())
	if err == nil {
		var v *model.CSIVolume
		if v, err = a.committed.volume(key); err == nil {
			resp.Volume = v.Proto()
		}
	}
	resp.Error = catalogErrorToProto(err)
	a.answer(ctx, msg.GetReplyTo(), resp)
}

func (a *catalogActor) onListPlugins(ctx actor.Context, msg *messages.ListCatalogPluginsRequest) {
	resp := &messages.ListCatalogPluginsResponse{}
	for _, id := range slices.Sorted(maps.Keys(a.committed.plugins)) {
		resp.Plugins = append(resp.Plugins, a.committed.plugins[id].Proto())
	}
	a.answer(ctx, msg.GetReplyTo(), resp)
}

func (a *catalogActor) onShutdown(ctx actor.Context, msg *messages.ShutdownCatalog) {
	a.closing = true
	if replyTo := cmp.Or(msg.GetReplyTo(), ctx.Sender()); replyTo != nil {
		a.shutdown = append(a.shutdown, replyTo)
	}
	a.finishShutdown(ctx)
}

// finishShutdown answers the shutdown once every accepted write is durable.
func (a *catalogActor) finishShutdown(ctx actor.Context) {
	if !a.closing || a.inflight != nil || len(a.queue) > 0 {
		return
	}
	for _, pid := range a.shutdown {
		ctx.Send(pid, &messages.ShutdownCatalogResponse{})
	}
	a.shutdown = nil
}
