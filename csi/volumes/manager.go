package volumes

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/internal/mountinfo"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/supervisor"
)

// manager is the volume manager actor. It owns the latest durable copy of
// every mount record of this node, the per-volume queues, the outcome of
// each volume's latest operation, the GC state, and the orphans found at
// start. The jobs it starts own a volume's record while they run.
type manager struct {
	cfg     Config
	env     *env
	log     hclog.Logger
	cancel  context.CancelFunc
	workers *sync.WaitGroup

	records  map[volumeKey]*messages.VolumeRecord
	queues   map[volumeKey]*queue
	outcomes map[volumeKey]outcome
	retries  map[volumeKey]*retry
	orphans  []string
	// startMounts is the mount table read at start, for the first
	// reconciles (read once, not once per record).
	startMounts map[string]bool
	started     bool

	running  int
	closing  bool
	shutdown []*actor.PID
	// standing is this node's standing in its fleet (SetStanding).
	standing model.Standing
	// stats is the periodic stats' state (statspoll.go).
	stats statsPoll
	// sweepTimer times the sweeps of staging and per-alloc directories
	// (stagingsweep.go).
	sweepTimer supervisor.Stopper
}

// outcome is how a volume's latest operation ended.
type outcome struct {
	op, err string
}

// recordSaved is sent by a job to the manager each time it made its
// volume's record durable.
type recordSaved struct {
	key volumeKey
	rec *messages.VolumeRecord
}

// jobDone is sent by a job to the manager when it has ended.
type jobDone struct {
	op     *op
	result MountResult
	expand NodeExpandResult
	err    error
	// written is the catalog's volume as the job's claim or release left
	// it: a claim's or a release's answer.
	written *model.CSIVolume
	// note is the job's (see job.note).
	note string
}

// Receive dispatches the manager's messages: lifecycle, requests, queries,
// the fleet's news, then what its jobs and timers send back.
func (m *manager) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		m.onStarted(ctx)
	case *messages.ShutdownVolumeManager:
		m.onShutdown(ctx, msg)
	case *actor.Stopped:
		m.onStopped()
	case *messages.MountAllocVolume, *messages.UnmountAllocVolume, *messages.ClaimAllocVolume,
		*messages.ReleaseAllocVolume, *messages.DetachVolume, *messages.NodeExpandAllocVolume:
		m.onRequest(ctx, requestOp(msg))
	case *messages.VolumeStatusRequest:
		m.onStatus(ctx, msg)
	case *messages.Subscribed:
	case *messages.PluginRegistered, *messages.PluginUpdated:
		m.onPluginAvailable(ctx, msg.(interface{ GetPlugin() *messages.PluginInfo }).GetPlugin().GetName())
	case *standingChanged:
		m.onStanding(ctx, msg.standing)
	case *claimsChanged:
		m.onClaimsChanged(ctx, msg.claims)
	case *resyncAsked:
		m.onResync(ctx, msg.reason)
	case *recordSaved:
		m.onRecordSaved(msg)
	case *jobDone:
		m.onJobDone(ctx, msg)
	case *retryDue:
		m.onRetryDue(ctx, msg)
	case *statsDue:
		m.onStatsDue(ctx)
	case *sweepDue:
		m.onSweepDue(ctx)
	case *statsPolled:
		m.onStatsPolled(ctx, msg)
	}
}

// onStarted queues a reconcile of every record loaded at start. A panic
// in Receive restarts the actor with this same instance (facade.go's
// producer): its jobs run on goroutines that report to it, and only it
// knows which volumes they hold, so its queues and records are kept; the
// message being received is lost, so every volume is reconciled again,
// each behind the jobs on it.
func (m *manager) onStarted(ctx actor.Context) {
	if m.started {
		m.log.Warn("the volume manager restarted after a panic: checking every volume again", "volumes", len(m.records))
		m.reconcileAll(ctx)
		return
	}
	m.started = true
	m.scheduleStats(ctx)
	m.scheduleSweep(ctx)
	// A volume left unsettled because its plugin was gone is reconciled as
	// soon as the plugin registers, not only at its next GC retry. The
	// registry drops this subscription when the actor stops.
	for _, ptype := range []string{NodePluginType, ControllerPluginType} {
		ctx.Send(m.cfg.Registry.PID(), &messages.Subscribe{Type: ptype, Subscriber: ctx.Self()})
	}
	keys := make([]volumeKey, 0, len(m.records))
	for k := range m.records {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b volumeKey) int { return strings.Compare(a.String(), b.String()) })
	for _, k := range keys {
		m.enqueue(ctx, &op{kind: opReconcile, key: k, mounts: m.startMounts})
	}
	m.startMounts = nil
}

// onRequest checks a request's IDs and queues it, or refuses it.
func (m *manager) onRequest(ctx actor.Context, o *op) {
	o.replyTo = replyTo(ctx, o.replyTo)
	err := checkRequest(o)
	if err == nil && m.closing {
		err = fmt.Errorf("%w: %s of volume %s refused", ErrShutDown, o, o.key)
	}
	if err != nil {
		m.answer(ctx, o, MountResult{}, nil, err)
		return
	}
	m.enqueue(ctx, o)
}

// checkRequest checks the IDs of a request.
func checkRequest(o *op) error {
	pairs := []string{"namespace", o.key.namespace, "volume ID", o.key.id}
	switch o.kind {
	case opDetach:
		pairs = append(pairs, "node ID", o.nodeID)
	case opReconcile, opNodeExpand:
	default:
		pairs = append(pairs, "alloc ID", o.alloc)
	}
	return checkIDs(pairs...)
}

func replyTo(ctx actor.Context, pid *actor.PID) *actor.PID {
	if pid != nil {
		return pid
	}
	return ctx.Sender()
}

// start runs o's job on a goroutine; its result comes back as jobDone.
func (m *manager) start(ctx actor.Context, o *op) {
	root, self := ctx.ActorSystem().Root, ctx.Self()
	j := newJob(m.env, o.key, m.records[o.key], func(rec *messages.VolumeRecord) {
		root.Send(self, &recordSaved{key: o.key, rec: rec})
	})
	j.doubts = &m.queues[o.key].doubts
	m.running++
	m.workers.Add(1)
	go func() {
		defer m.workers.Done()
		done := &jobDone{op: o}
		defer func() {
			if r := recover(); r != nil {
				done.err = fmt.Errorf("%s of volume %s panicked: %v", o, o.key, r)
			}
			done.note, done.written = j.note, j.written
			j.close(done.err)
			root.Send(self, done)
		}()
		opCtx, cancel := context.WithTimeout(m.env.base, m.env.opTimeout)
		defer cancel()
		if o.kind == opNodeExpand {
			done.expand, done.err = j.nodeExpand(opCtx, o.capacityBytes)
			return
		}
		done.result, done.err = run(opCtx, j, o)
	}()
}

// run is the body of o's job.
func run(ctx context.Context, j *job, o *op) (MountResult, error) {
	switch o.kind {
	case opMount:
		return j.mount(ctx, o.alloc, o.usage(), o.mountGroup)
	case opUnmount:
		if o.force {
			return MountResult{}, j.forceUnmount(ctx, o.alloc)
		}
		return MountResult{}, j.unmount(ctx, o.alloc)
	case opClaim:
		return MountResult{}, j.claimOnly(ctx, o.alloc, o.usage())
	case opRelease:
		return MountResult{}, j.release(ctx, o.alloc)
	case opDetach:
		return MountResult{}, j.forceDetach(ctx, o.nodeID)
	case opCondition:
		return MountResult{}, j.recordCondition(o.condition, o.target)
	}
	mounts := o.mounts
	if mounts == nil {
		var err error
		if mounts, err = mountinfo.PointsUnder(j.env.mountInfo, j.env.paths.root); err != nil {
			j.log.Warn("cannot read the mount table: published volumes are not checked", "error", err)
		}
	}
	return MountResult{}, j.reconcile(ctx, mounts)
}

func (m *manager) onRecordSaved(msg *recordSaved) {
	if firstPublished(msg.rec) == nil {
		m.dropSample(msg.key)
	}
	if recordEmpty(msg.rec) {
		delete(m.records, msg.key)
		return
	}
	m.records[msg.key] = msg.rec
}

func (m *manager) onJobDone(ctx actor.Context, msg *jobDone) {
	o := msg.op
	if o.kind == opCondition {
		m.onConditionDone(ctx, msg)
		return
	}
	m.running--
	errText := ""
	if msg.err != nil {
		errText = msg.err.Error()
		m.log.Warn(opNames[o.kind]+" failed", "volume", o.key.String(), "op", o.String(), "error", msg.err)
	}
	opText := o.String()
	if msg.note != "" {
		opText += " (" + msg.note + ")"
	}
	m.outcomes[o.key] = outcome{op: opText, err: errText}
	if o.kind == opNodeExpand {
		m.answerExpand(ctx, o, msg.expand, msg.err)
	} else {
		m.answer(ctx, o, msg.result, msg.written, msg.err)
	}
	if rec, ok := m.records[o.key]; ok && !settled(rec) {
		m.scheduleRetry(ctx, o.key, msg.err)
	} else {
		m.forgetRetry(o.key)
	}
	m.runNext(ctx, o.key)
	m.finishShutdown(ctx)
}

// answer sends o's response to its requester, if it has one: a claim's
// and a release's carry the volume as they left it (written).
func (m *manager) answer(ctx actor.Context, o *op, res MountResult, written *model.CSIVolume, err error) {
	if o.replyTo == nil {
		return
	}
	if o.kind == opNodeExpand {
		m.answerExpand(ctx, o, NodeExpandResult{}, err)
		return
	}
	if o.kind != opMount {
		resp := &messages.VolumeOpResponse{Error: messages.ErrorToProto(err)}
		if err == nil && written != nil && (o.kind == opClaim || o.kind == opRelease) {
			resp.Volume = written.Proto()
		}
		ctx.Send(o.replyTo, resp)
		return
	}
	resp := &messages.MountAllocVolumeResponse{Error: messages.ErrorToProto(err)}
	if err == nil {
		resp.TargetPath, resp.StagingPath, resp.IsDevice = res.TargetPath, res.StagingPath, res.IsDevice
	}
	ctx.Send(o.replyTo, resp)
}

// answerExpand sends a node expansion's response to its requester.
func (m *manager) answerExpand(ctx actor.Context, o *op, res NodeExpandResult, err error) {
	if o.replyTo == nil {
		return
	}
	resp := &messages.NodeExpandAllocVolumeResponse{Error: messages.ErrorToProto(err)}
	if err == nil {
		resp.Expanded, resp.CapacityBytes, resp.VolumePath, resp.Note = res.Expanded, res.CapacityBytes, res.VolumePath, res.Note
	}
	ctx.Send(o.replyTo, resp)
}

func (m *manager) onStatus(ctx actor.Context, msg *messages.VolumeStatusRequest) {
	to := replyTo(ctx, msg.GetReplyTo())
	key := volumeKey{msg.GetNamespace(), msg.GetVolumeId()}
	if err := checkIDs("namespace", key.namespace, "volume ID", key.id); err != nil {
		ctx.Send(to, &messages.VolumeStatusResponse{Error: messages.ErrorToProto(err)})
		return
	}
	resp := &messages.VolumeStatusResponse{Busy: m.busy(key)}
	if rec, ok := m.records[key]; ok {
		resp.Record = proto.Clone(rec).(*messages.VolumeRecord)
	}
	if out, ok := m.outcomes[key]; ok {
		resp.LastOperation, resp.LastError = out.op, out.err
	}
	suffix := "/" + key.namespace + "/" + key.id
	for _, o := range m.orphans {
		if strings.HasSuffix(o, suffix) {
			resp.Orphans = append(resp.Orphans, o)
		}
	}
	m.answerStatus(ctx, to, key, resp)
}

// onShutdown refuses what waits, cancels the running jobs' RPCs, and
// answers once they have ended.
func (m *manager) onShutdown(ctx actor.Context, msg *messages.ShutdownVolumeManager) {
	m.closing = true
	m.stopStats()
	m.stopSweep()
	m.shutdown = append(m.shutdown, replyTo(ctx, msg.GetReplyTo()))
	for _, o := range m.drain() {
		m.answer(ctx, o, MountResult{}, nil, fmt.Errorf("%w: %s of volume %s was waiting", ErrShutDown, o, o.key))
	}
	for key := range m.retries {
		m.forgetRetry(key)
	}
	m.cancel()
	m.finishShutdown(ctx)
}

func (m *manager) finishShutdown(ctx actor.Context) {
	if !m.closing || m.running > 0 {
		return
	}
	for _, pid := range m.shutdown {
		ctx.Send(pid, &messages.VolumeOpResponse{})
	}
	m.shutdown = nil
}

func (m *manager) onStopped() {
	m.cancel()
	m.stopStats()
	m.stopSweep()
	for key := range m.retries {
		m.forgetRetry(key)
	}
}
