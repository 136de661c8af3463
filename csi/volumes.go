package csi

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/asynkron/protoactor-go/actor"
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
)

// The volume manager actor.
//
// One actor per agent mounts the volumes of every csi-node plugin. It owns
// the usage tracker (which alloc uses which volume, how, and which usages
// of each volume are staged), a queue of operations per volume, and a
// client per plugin socket. A volume is (plugin, namespace, volume ID).
//
// Operations on one volume run one at a time, in the order they arrived;
// operations on different volumes run concurrently. The actor decides on
// its own goroutine what an operation must do (stage or not, unstage or
// not) from the tracker, runs the claim and the RPCs in a goroutine, and
// applies the outcome to the tracker when the result comes back as a
// message. Because the next operation on the volume starts only then, an
// unmount racing a mount can never unstage under the new mount (Nomad
// issue 20424): the two run one after the other.
//
// A mount: claim (Claimer) → NodeGetCapabilities (once per socket) →
// NodeStageVolume (if the plugin has STAGE_UNSTAGE_VOLUME and the usage is
// not staged yet) → NodePublishVolume. If publishing fails, a staging made
// by this mount is undone and the claim released.
//
// An unmount: NodeUnpublishVolume → remove the target path →
// NodeUnstageVolume (if this was the last alloc of a staged usage) →
// release the claim. Each step that succeeds is recorded, so a failed
// unmount retried later resumes where it stopped.

// volumeRef names one volume of one node plugin: operations on it run one
// at a time.
type volumeRef struct {
	plugin, namespace, volumeID string
}

// allocUse is how one alloc uses a volume. published is false once an
// unmount has unpublished it without finishing, or when a failed mount
// left the volume staged for it.
type allocUse struct {
	usage     Usage
	published bool
}

// volumeUsage is what the tracker knows of one volume.
type volumeUsage struct {
	allocs map[string]allocUse
	staged map[Usage]bool
}

// usageTracker knows which allocs use which volume and how, and which
// usages of each volume are staged. It belongs to the volume manager actor.
type usageTracker struct {
	volumes map[volumeRef]*volumeUsage
}

func newUsageTracker() *usageTracker {
	return &usageTracker{volumes: map[volumeRef]*volumeUsage{}}
}

// use returns how alloc uses the volume, if it does.
func (t *usageTracker) use(key volumeRef, alloc string) (allocUse, bool) {
	v, ok := t.volumes[key]
	if !ok {
		return allocUse{}, false
	}
	u, ok := v.allocs[alloc]
	return u, ok
}

func (t *usageTracker) volume(key volumeRef) *volumeUsage {
	v, ok := t.volumes[key]
	if !ok {
		v = &volumeUsage{allocs: map[string]allocUse{}, staged: map[Usage]bool{}}
		t.volumes[key] = v
	}
	return v
}

// set records how alloc uses the volume.
func (t *usageTracker) set(key volumeRef, alloc string, use allocUse) {
	t.volume(key).allocs[alloc] = use
}

// free forgets alloc's use of the volume.
func (t *usageTracker) free(key volumeRef, alloc string) {
	if v, ok := t.volumes[key]; ok {
		delete(v.allocs, alloc)
		t.gc(key)
	}
}

// users returns, sorted, the allocs that use the volume with usage u.
func (t *usageTracker) users(key volumeRef, u Usage) []string {
	var out []string
	if v, ok := t.volumes[key]; ok {
		for alloc, use := range v.allocs {
			if use.usage == u {
				out = append(out, alloc)
			}
		}
	}
	slices.Sort(out)
	return out
}

// lastUser reports whether alloc is the only alloc using the volume with usage u.
func (t *usageTracker) lastUser(key volumeRef, alloc string, u Usage) bool {
	return slices.Equal(t.users(key, u), []string{alloc})
}

// isStaged reports whether the volume is staged for usage u.
func (t *usageTracker) isStaged(key volumeRef, u Usage) bool {
	v, ok := t.volumes[key]
	return ok && v.staged[u]
}

// setStaged records whether the volume is staged for usage u.
func (t *usageTracker) setStaged(key volumeRef, u Usage, staged bool) {
	if staged {
		t.volume(key).staged[u] = true
		return
	}
	if v, ok := t.volumes[key]; ok {
		delete(v.staged, u)
		t.gc(key)
	}
}

// gc forgets a volume nobody uses and nothing stages.
func (t *usageTracker) gc(key volumeRef) {
	if v := t.volumes[key]; len(v.allocs) == 0 && len(v.staged) == 0 {
		delete(t.volumes, key)
	}
}

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
	usage          Usage
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
	client *Client
	caps   *NodeCapabilities
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
			ErrClaimRefused, op.allocID, op.key.volumeID, use.usage, spec.usage))
	case !use.published:
		a.finish(ctx, op, "", fmt.Errorf("csi: %w: alloc %s has an unfinished unmount of volume %q; retry the unmount first",
			ErrClaimRefused, op.allocID, op.key.volumeID))
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
		opts:    Options{RPCTimeout: a.cfg.RPCTimeout},
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

func (a *volumesActor) closeClient(socket string, c *Client) {
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

// Limits on mount options.
const (
	maxMountFlags   = 64
	maxMountFlagLen = 256
)

// fsTypePattern is what a file-system type may look like: "ext4", "fuse.sshfs".
var fsTypePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$`)

// parseVolumeOp checks the parts of a mount or unmount that name the volume and
// the alloc. The op it returns is never nil, so a refusal can be answered.
func parseVolumeOp(root, plugin, namespace, volumeID, allocID string) (*volumeOp, []error) {
	if namespace == "" {
		namespace = model.DefaultNamespace
	}
	op := &volumeOp{key: volumeRef{plugin: plugin, namespace: namespace, volumeID: volumeID}, allocID: allocID}
	var problems []error
	op.paths, problems = newPluginPaths(root, plugin)
	problems = appendIDProblem(problems, "namespace", namespace)
	problems = appendIDProblem(problems, "volume ID", volumeID)
	problems = appendIDProblem(problems, "alloc ID", allocID)
	return op, problems
}

func parseUnmountVolume(root string, msg *messages.UnmountVolume) (*volumeOp, error) {
	op, problems := parseVolumeOp(root, msg.GetPlugin(), msg.GetNamespace(), msg.GetVolumeId(), msg.GetAllocId())
	return op, invalidVolumeRequest(problems)
}

// parseMountVolume checks a mount request and works out its paths.
func parseMountVolume(root string, msg *messages.MountVolume) (*volumeOp, error) {
	op, problems := parseVolumeOp(root, msg.GetPlugin(), msg.GetNamespace(), msg.GetVolumeId(), msg.GetAllocId())
	spec := &mountSpec{
		usage: Usage{
			ReadOnly:       msg.GetReadOnly(),
			AttachmentMode: model.AttachmentMode(msg.GetAttachmentMode()),
			AccessMode:     model.AccessMode(msg.GetAccessMode()),
		},
		volumeContext:  msg.GetVolumeContext(),
		publishContext: msg.GetPublishContext(),
	}
	op.mount = spec
	problems = append(problems, spec.usage.problems()...)
	problems = append(problems, mountOptionProblems(spec.usage.AttachmentMode, msg.GetMountOptions())...)
	if err := invalidVolumeRequest(problems); err != nil {
		return op, err
	}
	if o := msg.GetMountOptions(); o != nil {
		spec.options = &MountOptions{FSType: o.GetFsType(), MountFlags: slices.Clone(o.GetMountFlags())}
	}
	var err error
	if spec.stagingPath, err = op.paths.Staging(op.key.namespace, op.key.volumeID, spec.usage); err != nil {
		return op, err
	}
	spec.targetPath, err = op.paths.Target(op.allocID, op.key.volumeID, spec.usage)
	return op, err
}

// mountOptionProblems says what is wrong with the mount options o for an
// attachment mode: a block device takes none; a file system takes an fs
// type of a plain name and mount flags that are not empty, not too long,
// and hold no ".." and no control characters.
func mountOptionProblems(attachment model.AttachmentMode, o *messages.MountOptions) []error {
	var problems []error
	fsType, flags := o.GetFsType(), o.GetMountFlags()
	if attachment == model.AttachmentModeBlockDevice {
		if fsType != "" {
			problems = append(problems, fmt.Errorf("attachment mode %s takes no fs_type (got %q)", attachment, fsType))
		}
		if len(flags) > 0 {
			problems = append(problems, fmt.Errorf("attachment mode %s takes no mount flags (got %d)", attachment, len(flags)))
		}
		return problems
	}
	if fsType != "" && !fsTypePattern.MatchString(fsType) {
		problems = append(problems, fmt.Errorf("fs_type %q must be 1 to 64 letters, digits, '.', '_', '+' or '-', starting with a letter or digit", fsType))
	}
	if len(flags) > maxMountFlags {
		problems = append(problems, fmt.Errorf("%d mount flags, over the limit of %d", len(flags), maxMountFlags))
	}
	for i, f := range flags {
		switch {
		case strings.TrimSpace(f) == "":
			problems = append(problems, fmt.Errorf("mount flag %d is empty", i+1))
		case len(f) > maxMountFlagLen:
			problems = append(problems, fmt.Errorf("mount flag %d is %d bytes, over the limit of %d", i+1, len(f), maxMountFlagLen))
		case strings.Contains(f, ".."):
			problems = append(problems, fmt.Errorf("mount flag %q must not contain \"..\"", f))
		case strings.IndexFunc(f, unicode.IsControl) >= 0:
			problems = append(problems, fmt.Errorf("mount flag %q must not contain control characters", f))
		}
	}
	return problems
}

// volumeAccessModes maps the catalog's access modes to CSI's.
var volumeAccessModes = map[model.AccessMode]csipb.VolumeCapability_AccessMode_Mode{
	model.AccessModeSingleNodeReader:      csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
	model.AccessModeSingleNodeWriter:      csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
	model.AccessModeMultiNodeReader:       csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY,
	model.AccessModeMultiNodeSingleWriter: csipb.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER,
	model.AccessModeMultiNodeMultiWriter:  csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER,
}

// volumeCapability is the CSI volume capability of a mount: its access
// mode, and a block or mount access type with the mount options.
func (s *mountSpec) volumeCapability() *csipb.VolumeCapability {
	c := &csipb.VolumeCapability{
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: volumeAccessModes[s.usage.AccessMode]},
	}
	if s.usage.AttachmentMode == model.AttachmentModeBlockDevice {
		c.AccessType = &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}
		return c
	}
	m := &csipb.VolumeCapability_MountVolume{}
	if s.options != nil {
		m.FsType, m.MountFlags = s.options.FSType, slices.Clone(s.options.MountFlags)
	}
	c.AccessType = &csipb.VolumeCapability_Mount{Mount: m}
	return c
}

// jobConn is a job's link to its plugin: the socket, the cached client
// it was given, and what it obtained itself for the actor to cache.
type jobConn struct {
	socket string
	client *Client
	// dialed is the client the job dialed because none was cached.
	dialed *Client
	// caps are the node capabilities the job fetched because none were cached.
	caps *NodeCapabilities
}

// volumeJobEnv is everything a job needs besides its own inputs. It runs off the
// actor's goroutine and touches no actor state.
type volumeJobEnv struct {
	op      *volumeOp
	conn    jobConn
	claimer Claimer
	opts    Options
	dialFor time.Duration
	retry   volumeRetry
	log     hclog.Logger
}

// connect returns the cached client, or dials the plugin.
func (e *volumeJobEnv) connect(ctx context.Context) (*Client, error) {
	if e.conn.client != nil {
		return e.conn.client, nil
	}
	dialCtx, cancel := context.WithTimeout(ctx, e.dialFor)
	defer cancel()
	c, err := Dial(dialCtx, e.conn.socket, e.opts)
	if err != nil {
		return nil, err
	}
	e.conn.client, e.conn.dialed = c, c
	return c, nil
}

// claim is the claim request of the job's alloc with usage u.
func (e *volumeJobEnv) claim(u Usage) ClaimRequest {
	k := e.op.key
	return ClaimRequest{Plugin: k.plugin, Namespace: k.namespace, VolumeID: k.volumeID, AllocID: e.op.allocID, Usage: u}
}

// describe puts err in the context of the job's operation.
func (e *volumeJobEnv) describe(err error) error {
	if err == nil || errors.Is(err, ErrClaimRefused) {
		return err
	}
	k := e.op.key
	return fmt.Errorf("csi: %s volume %q in namespace %q for alloc %s on plugin %q: %w",
		e.op.kind(), k.volumeID, k.namespace, e.op.allocID, k.plugin, err)
}

// unstage unstages the volume at stagingPath and removes the staging
// directory and its empty parents.
func (e *volumeJobEnv) unstage(ctx context.Context, client *Client, stagingPath string) error {
	req := &csipb.NodeUnstageVolumeRequest{VolumeId: e.op.key.volumeID, StagingTargetPath: stagingPath}
	if _, err := retryVolumeRPC(ctx, e, "NodeUnstageVolume", func(ctx context.Context) (*csipb.NodeUnstageVolumeResponse, error) {
		return client.NodeUnstageVolume(ctx, req)
	}); err != nil {
		return err
	}
	e.log.Info("volume unstaged", "staging_path", stagingPath)
	e.removeEmpty(stagingPath, StagingDirName)
	return nil
}

// removeEmpty removes dir and its empty parents up to <plugin root>/<top>;
// a failure is logged, not returned: the operation itself succeeded.
func (e *volumeJobEnv) removeEmpty(dir, top string) {
	if err := removeEmptyDirs(dir, filepath.Join(e.op.paths.Root(), top)); err != nil {
		e.log.Warn("could not remove an empty directory", "error", err)
	}
}

// mountJob claims, stages and publishes a volume for an alloc.
type mountJob struct {
	env   volumeJobEnv
	op    *volumeOp
	caps  *NodeCapabilities
	stage bool
}

// mountDone is a mount job's result, sent to the actor.
type mountDone struct {
	op   *volumeOp
	conn jobConn
	// stagingPath is where the volume is staged; empty when the plugin does not stage.
	stagingPath string
	// staged is true when this job staged the usage and it stays staged.
	staged bool
	// keepClaim is true when the mount failed but left the volume staged
	// for the alloc, which keeps its claim until it is unmounted.
	keepClaim bool
	err       error
}

func (j *mountJob) run(ctx context.Context) any {
	spec := j.op.mount
	res := &mountDone{op: j.op}
	claim := j.env.claim(spec.usage)
	if err := j.env.claimer.Claim(ctx, claim); err != nil {
		if !errors.Is(err, ErrClaimRefused) {
			err = fmt.Errorf("csi: %w: %w", ErrClaimRefused, err)
		}
		res.err, res.conn = err, j.env.conn
		return res
	}
	res.err = j.env.describe(j.mount(ctx, res))
	res.conn = j.env.conn
	if res.err != nil && !res.keepClaim {
		if err := j.env.claimer.Release(ctx, claim); err != nil {
			j.env.log.Error("could not release the claim of a failed mount", "error", err)
		}
	}
	return res
}

func (j *mountJob) mount(ctx context.Context, res *mountDone) error {
	client, err := j.env.connect(ctx)
	if err != nil {
		return err
	}
	caps, err := j.capabilities(ctx, client)
	if err != nil {
		return err
	}
	spec := j.op.mount
	if caps.StageUnstageVolume {
		res.stagingPath = spec.stagingPath
		if j.stage {
			if err := j.stageVolume(ctx, client); err != nil {
				return err
			}
			res.staged = true
		}
	}
	err = j.publish(ctx, client, res.stagingPath)
	if err == nil || !res.staged {
		return err
	}
	// Undo the staging this mount made: nobody else uses it.
	if uerr := j.env.unstage(ctx, client, spec.stagingPath); uerr != nil {
		res.keepClaim = true
		return fmt.Errorf("%w; undoing its staging failed too, so the alloc keeps its claim until it is unmounted: %w", err, uerr)
	}
	res.staged = false
	return err
}

// capabilities returns the plugin's node capabilities, cached or asked for.
func (j *mountJob) capabilities(ctx context.Context, client *Client) (NodeCapabilities, error) {
	if j.caps != nil {
		return *j.caps, nil
	}
	caps, err := retryVolumeRPC(ctx, &j.env, "NodeGetCapabilities", client.NodeGetCapabilities)
	if err != nil {
		return NodeCapabilities{}, err
	}
	j.env.conn.caps = &caps
	return caps, nil
}

func (j *mountJob) stageVolume(ctx context.Context, client *Client) error {
	spec := j.op.mount
	if err := mkdirPrivate(spec.stagingPath); err != nil {
		return err
	}
	req := &csipb.NodeStageVolumeRequest{
		VolumeId:          j.op.key.volumeID,
		PublishContext:    spec.publishContext,
		StagingTargetPath: spec.stagingPath,
		VolumeCapability:  spec.volumeCapability(),
		VolumeContext:     spec.volumeContext,
	}
	if _, err := retryVolumeRPC(ctx, &j.env, "NodeStageVolume", func(ctx context.Context) (*csipb.NodeStageVolumeResponse, error) {
		return client.NodeStageVolume(ctx, req)
	}); err != nil {
		j.env.removeEmpty(spec.stagingPath, StagingDirName)
		return err
	}
	j.env.log.Info("volume staged", "usage", spec.usage, "staging_path", spec.stagingPath)
	return nil
}

// publish publishes the volume at the alloc's target path. It creates the
// target's parent; the plugin creates the target itself (CSI spec).
func (j *mountJob) publish(ctx context.Context, client *Client, stagingPath string) error {
	spec := j.op.mount
	if err := mkdirPrivate(filepath.Dir(spec.targetPath)); err != nil {
		return err
	}
	req := &csipb.NodePublishVolumeRequest{
		VolumeId:          j.op.key.volumeID,
		PublishContext:    spec.publishContext,
		StagingTargetPath: stagingPath,
		TargetPath:        spec.targetPath,
		VolumeCapability:  spec.volumeCapability(),
		Readonly:          spec.usage.ReadOnly,
		VolumeContext:     spec.volumeContext,
	}
	if _, err := retryVolumeRPC(ctx, &j.env, "NodePublishVolume", func(ctx context.Context) (*csipb.NodePublishVolumeResponse, error) {
		return client.NodePublishVolume(ctx, req)
	}); err != nil {
		j.env.removeEmpty(filepath.Dir(spec.targetPath), PerAllocDirName)
		return err
	}
	j.env.log.Info("volume published", "usage", spec.usage, "target_path", spec.targetPath)
	return nil
}

// unmountJob unpublishes, unstages and releases a volume for an alloc,
// each step only if still to do.
type unmountJob struct {
	env         volumeJobEnv
	op          *volumeOp
	use         allocUse
	targetPath  string
	stagingPath string
	unstage     bool
}

// unmountDone is an unmount job's result, sent to the actor: which steps
// succeeded.
type unmountDone struct {
	op          *volumeOp
	conn        jobConn
	unpublished bool
	unstaged    bool
	released    bool
	err         error
}

func (j *unmountJob) run(ctx context.Context) any {
	res := &unmountDone{op: j.op}
	res.err = j.env.describe(j.unmount(ctx, res))
	res.conn = j.env.conn
	return res
}

func (j *unmountJob) unmount(ctx context.Context, res *unmountDone) error {
	if j.use.published || j.unstage {
		client, err := j.env.connect(ctx)
		if err != nil {
			return err
		}
		if j.use.published {
			if err := j.unpublish(ctx, client); err != nil {
				return err
			}
			res.unpublished = true
		}
		if j.unstage {
			if err := j.env.unstage(ctx, client, j.stagingPath); err != nil {
				return err
			}
			res.unstaged = true
		}
	}
	if err := j.env.claimer.Release(ctx, j.env.claim(j.use.usage)); err != nil {
		return err
	}
	res.released = true
	return nil
}

// unpublish unpublishes the volume from the alloc's target path, then
// removes the target (if the plugin left it) and its empty parents.
func (j *unmountJob) unpublish(ctx context.Context, client *Client) error {
	req := &csipb.NodeUnpublishVolumeRequest{VolumeId: j.op.key.volumeID, TargetPath: j.targetPath}
	if _, err := retryVolumeRPC(ctx, &j.env, "NodeUnpublishVolume", func(ctx context.Context) (*csipb.NodeUnpublishVolumeResponse, error) {
		return client.NodeUnpublishVolume(ctx, req)
	}); err != nil {
		return err
	}
	if err := os.Remove(j.targetPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("csi: NodeUnpublishVolume succeeded but the target path is still there: %w", err)
	}
	j.env.log.Info("volume unpublished", "target_path", j.targetPath)
	j.env.removeEmpty(filepath.Dir(j.targetPath), PerAllocDirName)
	return nil
}

// mkdirPrivate creates dir and its parents, readable by the agent only.
func mkdirPrivate(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("csi: create directory: %w", err)
	}
	return nil
}

// volumeRetry bounds the retries of a volume RPC.
type volumeRetry struct {
	attempts int
	backoff  time.Duration
	max      time.Duration
}

// delay is the wait before retry number n (1 for the first): backoff,
// doubled for each further retry, at most max.
func (p volumeRetry) delay(n int) time.Duration {
	d := p.backoff
	for i := 1; i < n && d < p.max; i++ {
		d *= 2
	}
	return min(d, p.max)
}

// retryableVolumeRPC reports whether an RPC error is worth another attempt: the
// plugin is unavailable, timed out, or has another operation on the volume
// in flight (Aborted).
func retryableVolumeRPC(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrDeadlineExceeded) || errors.Is(err, ErrAborted)
}

// retryVolumeRPC calls rpc until it succeeds, fails with an error that is not
// retryable (retryableVolumeRPC), has been tried e.retry.attempts times, or
// ctx ends.
func retryVolumeRPC[T any](ctx context.Context, e *volumeJobEnv, rpc string, call func(context.Context) (T, error)) (T, error) {
	for attempt := 1; ; attempt++ {
		out, err := call(ctx)
		if err == nil || !retryableVolumeRPC(err) {
			return out, err
		}
		if attempt >= e.retry.attempts {
			return out, fmt.Errorf("csi: gave up after %d attempts: %w", attempt, err)
		}
		wait := e.retry.delay(attempt)
		e.log.Warn("retrying RPC", "rpc", rpc, "attempt", attempt, "wait", wait, "error", err)
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return out, fmt.Errorf("csi: stopped retrying after %d attempts: %w: %w", attempt, ctx.Err(), err)
		}
	}
}
