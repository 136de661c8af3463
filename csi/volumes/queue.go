package volumes

import (
	"fmt"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
)

// opKind is what an operation does to its volume.
type opKind int

const (
	opMount opKind = iota
	opUnmount
	opClaim
	opRelease
	opDetach
	opReconcile
	opNodeExpand
	// opCondition records the condition the periodic stats found.
	opCondition
)

var opNames = map[opKind]string{
	opMount: "mount", opUnmount: "unmount", opClaim: "claim", opRelease: "release",
	opDetach: "detach", opReconcile: "reconcile", opNodeExpand: "node expand", opCondition: "condition",
}

// op is one operation waiting for, or holding, its volume.
type op struct {
	kind     opKind
	key      volumeKey
	alloc    string
	readOnly bool
	// access and attachment choose the volume's capability a mount or a
	// claim uses (see csi.Usage).
	access     model.AccessMode
	attachment model.AttachmentMode
	// mountGroup is a mount's GID for the node plugin (see
	// messages.MountAllocVolume.mount_group).
	mountGroup string
	// force is an unmount's: see messages.UnmountAllocVolume.
	force  bool
	nodeID string
	// capacityBytes is the size a node expansion grows the volume to.
	capacityBytes int64
	// mounts is the mount table a reconcile starts from; nil makes it
	// read the table itself.
	mounts map[string]bool
	// condition is what a condition job records, if the volume is still
	// published at target.
	condition, target string
	// replyTo is the requester; nil for the manager's own reconciles.
	replyTo *actor.PID
}

// requestOp is the operation a request message asks for (one of the
// types Receive hands to onRequest).
func requestOp(msg any) *op {
	switch m := msg.(type) {
	case *messages.MountAllocVolume:
		return &op{kind: opMount, key: volumeKey{m.GetNamespace(), m.GetVolumeId()}, alloc: m.GetAllocId(), readOnly: m.GetReadOnly(),
			access: model.AccessMode(m.GetAccessMode()), attachment: model.AttachmentMode(m.GetAttachmentMode()),
			mountGroup: m.GetMountGroup(), replyTo: m.GetReplyTo()}
	case *messages.UnmountAllocVolume:
		return &op{kind: opUnmount, key: volumeKey{m.GetNamespace(), m.GetVolumeId()}, alloc: m.GetAllocId(), force: m.GetForce(),
			replyTo: m.GetReplyTo()}
	case *messages.ClaimAllocVolume:
		return &op{kind: opClaim, key: volumeKey{m.GetNamespace(), m.GetVolumeId()}, alloc: m.GetAllocId(), readOnly: m.GetReadOnly(),
			access: model.AccessMode(m.GetAccessMode()), attachment: model.AttachmentMode(m.GetAttachmentMode()), replyTo: m.GetReplyTo()}
	case *messages.ReleaseAllocVolume:
		return &op{kind: opRelease, key: volumeKey{m.GetNamespace(), m.GetVolumeId()}, alloc: m.GetAllocId(), replyTo: m.GetReplyTo()}
	case *messages.DetachVolume:
		return &op{kind: opDetach, key: volumeKey{m.GetNamespace(), m.GetVolumeId()}, nodeID: m.GetNodeId(), replyTo: m.GetReplyTo()}
	case *messages.NodeExpandAllocVolume:
		return &op{kind: opNodeExpand, key: volumeKey{m.GetNamespace(), m.GetVolumeId()}, capacityBytes: m.GetCapacityBytes(),
			replyTo: m.GetReplyTo()}
	}
	panic(fmt.Sprintf("no operation for a %T", msg))
}

// String names the operation for the volume's status and the logs.
func (o *op) String() string {
	switch {
	case o.force:
		return opNames[o.kind] + " -force " + o.alloc
	case o.alloc != "":
		return opNames[o.kind] + " " + o.alloc
	case o.nodeID != "":
		return opNames[o.kind] + " " + o.nodeID
	}
	return opNames[o.kind]
}

// queue holds the operations on one volume: the running one and those
// waiting behind it, oldest first. Operations on one volume run one at a
// time, in the order they arrived; different volumes run concurrently.
type queue struct {
	running *op
	pending []*op
	// doubts counts the times the fleet's claims of the volume came into
	// doubt (see job.claimKept): the manager adds, the running job reads.
	doubts atomic.Uint64
}

// enqueue puts o behind the operations on its volume and starts it when
// none runs. A reconcile already waiting makes another one redundant.
func (m *manager) enqueue(ctx actor.Context, o *op) {
	q, ok := m.queues[o.key]
	if !ok {
		q = &queue{}
		m.queues[o.key] = q
	}
	if o.kind == opReconcile {
		for _, p := range q.pending {
			if p.kind == opReconcile {
				return
			}
		}
	}
	q.pending = append(q.pending, o)
	if q.running == nil {
		m.runNext(ctx, o.key)
	}
}

// runNext starts the oldest operation waiting on the volume, if any.
func (m *manager) runNext(ctx actor.Context, key volumeKey) {
	q, ok := m.queues[key]
	if !ok {
		return
	}
	q.running = nil
	if len(q.pending) == 0 {
		delete(m.queues, key)
		return
	}
	o := q.pending[0]
	q.pending[0] = nil
	q.pending = q.pending[1:]
	q.running = o
	m.start(ctx, o)
}

// busy reports whether an operation runs on the volume.
func (m *manager) busy(key volumeKey) bool {
	q, ok := m.queues[key]
	return ok && q.running != nil
}

// drain removes and returns every waiting operation, for shutdown.
func (m *manager) drain() []*op {
	var out []*op
	for _, q := range m.queues {
		out = append(out, q.pending...)
		q.pending = nil
	}
	return out
}
