package volumes

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/messages"
)

// volumeOp is one mount or unmount waiting for, or holding, its volume.
type volumeOp struct {
	key     volumeRef
	allocID string
	paths   PluginPaths
	// mount is set for a mount, nil for an unmount.
	mount   *mountSpec
	replyTo *actor.PID
}

// mountSpec is a validated mount request.
type mountSpec struct {
	usage          csi.Usage
	options        *MountOptions
	volumeContext  map[string]string
	publishContext map[string]string
	stagingPath    string
	targetPath     string
}

// volumeQueue holds the operations on one volume: the running one (busy) and
// those waiting behind it, oldest first.
type volumeQueue struct {
	busy    bool
	pending []*volumeOp
}

// volumeClient is the client of one plugin socket, shared by the jobs that
// use it, and the plugin's node capabilities once known.
type volumeClient struct {
	client *csi.Client
	caps   *csi.NodeCapabilities
	inUse  int
}

type volumesActor struct {
	cfg     VolumesConfig
	log     hclog.Logger
	tracker *usageTracker
	queues  map[volumeRef]*volumeQueue
	clients map[string]*volumeClient
	running int
	workers *sync.WaitGroup
	// jobCtx is the context of every job; shutdown cancels it.
	jobCtx     context.Context
	cancelJobs context.CancelFunc
	closing    bool
	shutdown   []*actor.PID
}

func newVolumesActor(cfg VolumesConfig, workers *sync.WaitGroup) *volumesActor {
	jobCtx, cancel := context.WithCancel(context.Background())
	return &volumesActor{
		cfg:        cfg,
		log:        cfg.Logger,
		tracker:    newUsageTracker(),
		queues:     map[volumeRef]*volumeQueue{},
		clients:    map[string]*volumeClient{},
		workers:    workers,
		jobCtx:     jobCtx,
		cancelJobs: cancel,
	}
}

// Receive handles mounts, unmounts, the results of their jobs, and shutdown.
func (a *volumesActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *messages.MountVolume:
		a.onMountVolume(ctx, msg)
	case *messages.UnmountVolume:
		a.onUnmountVolume(ctx, msg)
	case *mountDone:
		a.onMountDone(ctx, msg)
	case *unmountDone:
		a.onUnmountDone(ctx, msg)
	case *messages.ShutdownVolumes:
		a.onShutdown(ctx, msg)
	case *actor.Stopped:
		a.onStopped()
	}
}

func (a *volumesActor) onMountVolume(ctx actor.Context, msg *messages.MountVolume) {
	op, err := parseMountVolume(a.cfg.Root, msg)
	op.replyTo = volumeReplyTo(ctx, msg.GetReplyTo())
	a.admit(ctx, op, err)
}

func (a *volumesActor) onUnmountVolume(ctx actor.Context, msg *messages.UnmountVolume) {
	op, err := parseUnmountVolume(a.cfg.Root, msg)
	op.replyTo = volumeReplyTo(ctx, msg.GetReplyTo())
	a.admit(ctx, op, err)
}

// volumeReplyTo is where to answer a request: its reply_to, or its sender.
func volumeReplyTo(ctx actor.Context, replyTo *actor.PID) *actor.PID {
	if replyTo != nil {
		return replyTo
	}
	return ctx.Sender()
}

// admit queues op behind the operations on its volume, or refuses it with
// err (bad input) or because the volume manager is shutting down.
func (a *volumesActor) admit(ctx actor.Context, op *volumeOp, err error) {
	if err == nil && a.closing {
		err = fmt.Errorf("csi: %w", ErrVolumesShutDown)
	}
	if err != nil {
		a.opLog(op).Warn(op.kind()+" refused", "error", err)
		op.answer(ctx, "", err)
		return
	}
	q, ok := a.queues[op.key]
	if !ok {
		q = &volumeQueue{}
		a.queues[op.key] = q
	}
	q.pending = append(q.pending, op)
	if q.busy {
		a.opLog(op).Debug(op.kind()+" waits for the operation running on the volume", "waiting", len(q.pending))
		return
	}
	a.runNext(ctx, op.key)
}

// runNext starts the oldest operation waiting on the volume. Operations
// that need no RPC are answered at once, and the next one is tried.
func (a *volumesActor) runNext(ctx actor.Context, key volumeRef) {
	q, ok := a.queues[key]
	if !ok {
		return
	}
	q.busy = false
	for len(q.pending) > 0 {
		op := q.pending[0]
		q.pending[0] = nil
		q.pending = q.pending[1:]
		if a.start(ctx, op) {
			q.busy = true
			return
		}
	}
	delete(a.queues, key)
}

// start starts op's job and reports true, or answers op and reports false.
func (a *volumesActor) start(ctx actor.Context, op *volumeOp) bool {
	if op.mount != nil {
		return a.startMount(ctx, op)
	}
	return a.startUnmount(ctx, op)
}

func (a *volumesActor) startMount(ctx actor.Context, op *volumeOp) bool {
	spec := op.mount
	if use, held := a.tracker.use(op.key, op.allocID); held {
		a.answerHeldMount(ctx, op, use)
		return false
	}
	env, err := a.newJobEnv(op)
	if err != nil {
		a.finish(ctx, op, "", err)
		return false
	}
	job := &mountJob{
		env:   env,
		op:    op,
		caps:  a.clients[env.conn.socket].caps,
		stage: !a.tracker.isStaged(op.key, spec.usage),
	}
	a.opLog(op).Debug("mounting volume", "usage", spec.usage, "stage", job.stage)
	a.launch(ctx, job.run)
	return true
}

// answerHeldMount answers a mount for an alloc that already uses the volume.
func (a *volumesActor) answerHeldMount(ctx actor.Context, op *volumeOp, use allocUse) {
	spec := op.mount
	switch {
	case use.usage != spec.usage:
		a.finish(ctx, op, "", fmt.Errorf("csi: %w: alloc %s already mounts volume %q as %s; unmount it before mounting it as %s",
			csi.ErrClaimRefused, op.allocID, op.key.volumeID, use.usage, spec.usage))
	case !use.published:
		a.finish(ctx, op, "", fmt.Errorf("csi: %w: alloc %s has an unfinished unmount of volume %q; retry the unmount first",
			csi.ErrClaimRefused, op.allocID, op.key.volumeID))
	default:
		staging := ""
		if a.tracker.isStaged(op.key, spec.usage) {
			staging = spec.stagingPath
		}
		a.opLog(op).Debug("volume already mounted for the alloc", "target_path", spec.targetPath)
		op.answer(ctx, staging, nil)
	}
}

func (a *volumesActor) startUnmount(ctx actor.Context, op *volumeOp) bool {
	use, held := a.tracker.use(op.key, op.allocID)
	if !held {
		a.finish(ctx, op, "", fmt.Errorf("csi: %w: alloc %s does not mount volume %q in namespace %q of plugin %q",
			ErrNotMounted, op.allocID, op.key.volumeID, op.key.namespace, op.key.plugin))
		return false
	}
	job := &unmountJob{
		op:      op,
		use:     use,
		unstage: a.tracker.isStaged(op.key, use.usage) && a.tracker.lastUser(op.key, op.allocID, use.usage),
	}
	var err error
	if job.targetPath, err = op.paths.Target(op.allocID, op.key.volumeID, use.usage); err == nil {
		job.stagingPath, err = op.paths.Staging(op.key.namespace, op.key.volumeID, use.usage)
	}
	if err == nil && (use.published || job.unstage) {
		job.env, err = a.newJobEnv(op)
	} else if err == nil {
		job.env = a.claimOnlyEnv(op)
	}
	if err != nil {
		a.finish(ctx, op, "", err)
		return false
	}
	a.opLog(op).Debug("unmounting volume", "usage", use.usage, "unpublish", use.published, "unstage", job.unstage)
	a.launch(ctx, job.run)
	return true
}

// launch runs job in a goroutine and sends its result to the actor.
func (a *volumesActor) launch(ctx actor.Context, job func(context.Context) any) {
	a.running++
	a.workers.Add(1)
	root, self, jobCtx, workers := ctx.ActorSystem().Root, ctx.Self(), a.jobCtx, a.workers
	go func() {
		defer workers.Done()
		root.Send(self, job(jobCtx))
	}()
}

func (a *volumesActor) onMountDone(ctx actor.Context, res *mountDone) {
	op, spec := res.op, res.op.mount
	a.jobEnded(res.conn)
	switch {
	case res.err == nil:
		a.tracker.set(op.key, op.allocID, allocUse{usage: spec.usage, published: true})
	case res.keepClaim:
		a.tracker.set(op.key, op.allocID, allocUse{usage: spec.usage})
	}
	if res.staged {
		a.tracker.setStaged(op.key, spec.usage, true)
	}
	if res.err == nil {
		a.opLog(op).Info("volume mounted", "usage", spec.usage, "target_path", spec.targetPath, "staging_path", res.stagingPath)
	}
	a.finish(ctx, op, res.stagingPath, res.err)
}

func (a *volumesActor) onUnmountDone(ctx actor.Context, res *unmountDone) {
	op := res.op
	a.jobEnded(res.conn)
	use, _ := a.tracker.use(op.key, op.allocID)
	if res.unpublished {
		use.published = false
		a.tracker.set(op.key, op.allocID, use)
	}
	if res.unstaged {
		a.tracker.setStaged(op.key, use.usage, false)
	}
	if res.released {
		a.tracker.free(op.key, op.allocID)
		a.opLog(op).Info("volume unmounted", "usage", use.usage, "unstaged", res.unstaged)
	}
	a.finish(ctx, op, "", res.err)
}

// finish answers op and starts the next operation on its volume. It is
// where every admitted operation ends.
func (a *volumesActor) finish(ctx actor.Context, op *volumeOp, stagingPath string, err error) {
	if err != nil {
		a.opLog(op).Warn(op.kind()+" failed", "error", err)
	}
	op.answer(ctx, stagingPath, err)
	if q, ok := a.queues[op.key]; ok && q.busy {
		a.runNext(ctx, op.key)
	}
	a.finishShutdown(ctx)
}

// answer sends op's response to its requester, if it has one.
func (op *volumeOp) answer(ctx actor.Context, stagingPath string, err error) {
	if op.replyTo == nil {
		return
	}
	if op.mount == nil {
		ctx.Send(op.replyTo, &messages.UnmountVolumeResponse{Error: volumeErrorToProto(err)})
		return
	}
	resp := &messages.MountVolumeResponse{Error: volumeErrorToProto(err)}
	if err == nil {
		resp.TargetPath, resp.StagingPath = op.mount.targetPath, stagingPath
	}
	ctx.Send(op.replyTo, resp)
}

func (op *volumeOp) kind() string {
	if op.mount != nil {
		return "mount"
	}
	return "unmount"
}

// opLog is the logger for op: plugin, namespace, volume and alloc.
func (a *volumesActor) opLog(op *volumeOp) hclog.Logger {
	return a.log.With("plugin", op.key.plugin, "namespace", op.key.namespace,
		"volume_id", op.key.volumeID, "alloc_id", op.allocID)
}

// newJobEnv is what a job needs to reach the plugin of op: its current socket,
// the cached client if any (otherwise the job dials), and the claimer.
func (a *volumesActor) newJobEnv(op *volumeOp) (volumeJobEnv, error) {
	info, ok := a.cfg.Registry.Snapshot().Current(NodePluginType, op.key.plugin)
	if !ok {
		return volumeJobEnv{}, pluginNotFoundError(op.key.plugin)
	}
	socket := info.GetConnection().GetSocketPath()
	if socket == "" {
		return volumeJobEnv{}, fmt.Errorf("csi: plugin %q (alloc %s) has no unix socket: the volume manager dials sockets only",
			op.key.plugin, info.GetAllocId())
	}
	pc, ok := a.clients[socket]
	if !ok {
		pc = &volumeClient{}
		a.clients[socket] = pc
	}
	pc.inUse++
	env := a.claimOnlyEnv(op)
	env.conn = jobConn{socket: socket, client: pc.client}
	return env, nil
}

// claimOnlyEnv is the environment of a job that sends no RPC.
func (a *volumesActor) claimOnlyEnv(op *volumeOp) volumeJobEnv {
	return volumeJobEnv{
		op:      op,
		claimer: a.cfg.Claimer,
		opts:    csi.Options{RPCTimeout: a.cfg.RPCTimeout},
		dialFor: a.cfg.DialTimeout,
		retry:   volumeRetry{attempts: a.cfg.RetryAttempts, backoff: a.cfg.RetryBackoff, max: a.cfg.RetryBackoffMax},
		log:     a.opLog(op),
	}
}

// jobEnded counts a job as ended and takes back the client it used: it caches a client or
// capabilities the job obtained, closes a client dialed twice, and closes
// the client of a socket that is no longer any plugin's once no job uses it.
func (a *volumesActor) jobEnded(c jobConn) {
	a.running--
	pc, ok := a.clients[c.socket]
	if !ok {
		return
	}
	pc.inUse--
	switch {
	case c.dialed == nil:
	case pc.client == nil:
		pc.client = c.dialed
	case pc.client != c.dialed:
		a.closeClient(c.socket, c.dialed)
	}
	if pc.caps == nil && c.caps != nil {
		pc.caps = c.caps
	}
	if pc.inUse == 0 && !a.isCurrentSocket(c.socket) {
		a.closeClient(c.socket, pc.client)
		delete(a.clients, c.socket)
	}
}

func (a *volumesActor) isCurrentSocket(socket string) bool {
	for _, p := range a.cfg.Registry.Snapshot().List(NodePluginType) {
		if p.GetConnection().GetSocketPath() == socket {
			return true
		}
	}
	return false
}

func (a *volumesActor) closeClient(socket string, c *csi.Client) {
	if c == nil {
		return
	}
	if err := c.Close(); err != nil {
		a.log.Warn("closing plugin client failed", "socket", socket, "error", err)
	}
}

// onShutdown refuses what waits, cancels what runs, and answers once the
// running jobs have ended (finishShutdown).
func (a *volumesActor) onShutdown(ctx actor.Context, msg *messages.ShutdownVolumes) {
	if replyTo := volumeReplyTo(ctx, msg.GetReplyTo()); replyTo != nil {
		a.shutdown = append(a.shutdown, replyTo)
	}
	if !a.closing {
		a.closing = true
		a.cancelJobs()
		a.log.Info("volume manager shutting down", "operations_running", a.running)
		for _, key := range slices.Collect(maps.Keys(a.queues)) {
			q := a.queues[key]
			pending := q.pending
			q.pending = nil
			for _, op := range pending {
				op.answer(ctx, "", fmt.Errorf("csi: %w: %s was queued", ErrVolumesShutDown, op.kind()))
			}
			if !q.busy {
				delete(a.queues, key)
			}
		}
	}
	a.finishShutdown(ctx)
}

// finishShutdown closes the clients and answers the shutdown once no job runs.
func (a *volumesActor) finishShutdown(ctx actor.Context) {
	if !a.closing || a.running > 0 {
		return
	}
	a.closeClients()
	for _, pid := range a.shutdown {
		ctx.Send(pid, &messages.ShutdownVolumesResponse{})
	}
	a.shutdown = nil
}

// onStopped cancels jobs and closes clients when the actor is stopped
// without a shutdown.
func (a *volumesActor) onStopped() {
	a.cancelJobs()
	a.closeClients()
}

func (a *volumesActor) closeClients() {
	for socket, pc := range a.clients {
		a.closeClient(socket, pc.client)
	}
	clear(a.clients)
}
