package member

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/messages"
)

// Router is a member's model.Fleet. The changes of a volume (claims,
// releases, registration, deregistration, deletion mark, capacity) go
// through the volume's grain, wherever the cluster places it, so that one
// volume's changes run one at a time; reads (a volume, the list, the
// plugins) and this node's fingerprints go to the fleet.Store directly.
//
// A change whose grain does not answer (its member died and the topology
// has not caught up, or it is starting on another member) is sent again
// until ctx ends, or, when ctx has no deadline, for the membership lease
// TTL plus three request timeouts: long enough for the others to see a
// dead member go. Sending again is safe (messages/fleet.proto). When no
// grain answers in time, the error is model.ErrFleetUnavailable; the
// grain's own answer, refusal or success, is returned as it is.
type Router struct {
	member  *Member
	attempt time.Duration // bound of one request to a grain
	budget  time.Duration // bound of all attempts when ctx has none
	// sending counts the requests out, those given up on included: the
	// member's Stop waits for them.
	sending sync.WaitGroup
}

var (
	_ model.Fleet       = (*Router)(nil)
	_ model.BatchFleet  = (*Router)(nil)
	_ model.ModifyFleet = (*Router)(nil)
)

// newRouter gives one request to a grain more time than the grain gives
// the Store (twice the request timeout), so that the grain's answer, an
// error included, arrives before the Router gives up on it.
func newRouter(m *Member) *Router {
	timeout := m.cfg.Fleet.RequestTimeout
	return &Router{member: m, attempt: 3 * timeout, budget: m.cfg.Fleet.LeaseTTL + 3*timeout}
}

// Claim applies c to the volume through its grain.
func (r *Router) Claim(ctx context.Context, namespace, id string, c *model.Claim) (*model.CSIVolume, error) {
	return r.change(ctx, namespace, id, &messages.FleetClaimVolume{Claim: model.ClaimToProto(c)})
}

// Release moves c.AllocID's claim to c.State through the volume's grain.
func (r *Router) Release(ctx context.Context, namespace, id string, c *model.Claim) (*model.CSIVolume, error) {
	return r.change(ctx, namespace, id, &messages.FleetReleaseVolume{Claim: model.ClaimToProto(c)})
}

// RegisterVolume registers v through its grain.
func (r *Router) RegisterVolume(ctx context.Context, v *model.CSIVolume) (*model.CSIVolume, error) {
	v = v.Copy()
	v.Namespace = cmp.Or(v.Namespace, model.DefaultNamespace)
	return r.change(ctx, v.Namespace, v.ID, &messages.FleetRegisterVolume{Volume: v.Proto()})
}

// DeregisterVolume removes the volume through its grain. A volume that is
// not found when the request had to be sent again is taken as removed by
// the earlier attempt.
func (r *Router) DeregisterVolume(ctx context.Context, namespace, id string) error {
	_, err := r.change(ctx, namespace, id, &messages.FleetDeregisterVolume{})
	return err
}

// RegisterVolumes registers a batch in one transaction of the fleet.Store,
// not through the volumes' grains: the grains own no volume state, and the
// transaction is guarded on each volume's record as a grain's change is.
func (r *Router) RegisterVolumes(ctx context.Context, vs []*model.CSIVolume) ([]*model.CSIVolume, error) {
	return r.member.store.Load().RegisterVolumes(ctx, vs)
}

// DeregisterVolumes removes a batch in one transaction of the fleet.Store,
// as RegisterVolumes does.
func (r *Router) DeregisterVolumes(ctx context.Context, namespace string, ids []string) error {
	return r.member.store.Load().DeregisterVolumes(ctx, namespace, ids)
}

// RecordVolumeModify records a modify's mutable parameters in one
// transaction of the fleet.Store, as RegisterVolumes does: guarded on the
// volume's record as a grain's change is.
func (r *Router) RecordVolumeModify(ctx context.Context, namespace, id string, params map[string]string) (*model.CSIVolume, error) {
	return r.member.store.Load().RecordVolumeModify(ctx, namespace, id, params)
}

// MarkVolumeDeleting marks the volume as being deleted through its grain.
func (r *Router) MarkVolumeDeleting(ctx context.Context, namespace, id string) (*model.CSIVolume, error) {
	return r.change(ctx, namespace, id, &messages.FleetMarkVolumeDeleting{})
}

// RecordVolumeCapacity records the volume's capacity through its grain.
func (r *Router) RecordVolumeCapacity(ctx context.Context, namespace, id string, capacityBytes int64) (*model.CSIVolume, error) {
	return r.change(ctx, namespace, id, &messages.FleetRecordVolumeCapacity{CapacityBytes: capacityBytes})
}

// Attach records the attachment a through the volume's grain.
func (r *Router) Attach(ctx context.Context, namespace, id string, a *model.Attachment) (*model.CSIVolume, error) {
	if a == nil {
		return nil, model.Refusef(model.ErrInvalid, "attach: attachment must not be nil")
	}
	return r.change(ctx, namespace, id, &messages.FleetAttachVolume{Attachment: model.AttachmentToProto(a)})
}

// Detach removes the attachment to node through the volume's grain.
func (r *Router) Detach(ctx context.Context, namespace, id, node string) (*model.CSIVolume, error) {
	return r.change(ctx, namespace, id, &messages.FleetDetachVolume{NodeId: node})
}

// MarkDetaching marks the attachment to node as being detached through
// the volume's grain.
func (r *Router) MarkDetaching(ctx context.Context, namespace, id, node string) (*model.CSIVolume, error) {
	return r.change(ctx, namespace, id, &messages.FleetMarkDetaching{NodeId: node})
}

// CheckRoom reads the fleet's volume limit from etcd.
func (r *Router) CheckRoom(ctx context.Context, namespace, id string) error {
	return r.member.store.Load().CheckRoom(ctx, namespace, id)
}

// ListVolumes reads the volumes of namespace from etcd.
func (r *Router) ListVolumes(ctx context.Context, namespace string) ([]*model.CSIVolumeStub, error) {
	return r.member.store.Load().ListVolumes(ctx, namespace)
}

// GetVolume reads one volume from etcd.
func (r *Router) GetVolume(ctx context.Context, namespace, id string) (*model.CSIVolume, error) {
	return r.member.store.Load().GetVolume(ctx, namespace, id)
}

// Plugins reads the plugins and their health counts over every live node.
func (r *Router) Plugins(ctx context.Context) ([]*model.CSIPlugin, error) {
	return r.member.store.Load().Plugins(ctx)
}

// PutFingerprints replaces this node's fingerprints under its lease.
func (r *Router) PutFingerprints(ctx context.Context, fps []*messages.CSIFingerprint) error {
	return r.member.store.Load().PutFingerprints(ctx, fps)
}

// Owner is the ID of the member whose grain answers for the volume now
// (starting the grain if none runs), or "" when no member does.
func (r *Router) Owner(namespace, id string) string {
	c := r.member.Cluster()
	if c == nil {
		return ""
	}
	pid := c.Get(volumeIdentity(cmp.Or(namespace, model.DefaultNamespace), id), VolumeKind)
	if pid == nil {
		return ""
	}
	for _, mem := range *r.member.topology.Load() {
		if mem.Address() == pid.Address {
			return mem.Id
		}
	}
	return ""
}

// change sends msg to the grain of the volume (namespace, id) until a grain
// answers or the time is up. Every attempt carries one request ID. When no
// grain answers in time (or ctx is cancelled) the outcome is resolved
// before anything is answered: see resolve.
func (r *Router) change(ctx context.Context, namespace, id string, msg proto.Message) (*model.CSIVolume, error) {
	namespace, err := model.VolumeKey(namespace, id)
	if err != nil {
		return nil, err
	}
	identity := volumeIdentity(namespace, id)
	request := newRequestID()
	stampRequest(msg, request)
	if err := sign(r.member.cfg.Fleet.Keyring, msg); err != nil {
		return nil, fmt.Errorf("sign the %s of volume %s: %w", describe(msg), identity, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.budget)
		defer cancel()
	}
	start, wait := time.Now(), firstWait
	for attempt := 1; ; attempt++ {
		deadline, _ := ctx.Deadline()
		changed := r.member.topologyChanged()
		res, err := r.send(ctx, identity, msg, min(r.attempt, time.Until(deadline)), changed)
		if answer, ok := res.(*messages.FleetVolumeResponse); ok {
			v, err := answered(answer, msg, attempt)
			if errors.Is(err, model.ErrOutcomeUnknown) {
				// The grain's write went to etcd, and its answer did not
				// come back: it may have been applied.
				return r.resolve(namespace, id, msg, request,
					fmt.Errorf("%s of volume %s: etcd did not answer its grain's write", describe(msg), identity))
			}
			if attempt > 1 {
				return r.settle(namespace, id, msg, request, v, err)
			}
			return v, err
		}
		if err == nil {
			err = fmt.Errorf("an answer of type %T", res)
		}
		if errors.Is(err, errTopologyChanged) || errors.Is(err, errJoining) {
			wait = firstWait // the grain has a new place: no reason to wait long
		}
		if !pause(ctx, wait, changed) {
			gaveUp := fmt.Errorf("%s of volume %s: no member of the cluster answered within %v (%d attempts; last: %v)",
				describe(msg), identity, time.Since(start).Round(time.Millisecond), attempt, err)
			if errors.Is(ctx.Err(), context.Canceled) {
				gaveUp = fmt.Errorf("%s of volume %s: %w", describe(msg), identity, ctx.Err())
			}
			return r.resolve(namespace, id, msg, request, gaveUp)
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// resolve answers a change that its grain did not answer in time, or
// whose grain's write etcd did not answer: it may have been applied, or
// may still be, so it is never reported refused as it stands. The
// Router first writes the request's tombstone (fleet.Store.AbandonRequest),
// after which the request can never commit, then reads the volume back:
// when the change is there (applied), it succeeded; when not, it was not
// applied and never will be, and the error matches
// model.ErrFleetUnavailable. When etcd does not answer either, the outcome
// is unknown (model.ErrOutcomeUnknown): sending the same request again is
// safe.
func (r *Router) resolve(namespace, id string, msg proto.Message, request string, gaveUp error) (*model.CSIVolume, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.member.cfg.Fleet.RequestTimeout)
	defer cancel()
	store := r.member.store.Load()
	err := errNoStore
	if store != nil {
		err = store.AbandonRequest(ctx, request)
	}
	var v *model.CSIVolume
	if err == nil {
		v, err = store.GetVolume(ctx, namespace, id)
		if errors.Is(err, model.ErrVolumeNotFound) {
			v, err = nil, nil
		}
	}
	switch {
	case err != nil:
		return nil, errclass.Also(model.Refusef(model.ErrOutcomeUnknown,
			"%v, and its outcome cannot be read back (%v): it may or may not have been applied; sending the same request again is safe", gaveUp, err),
			model.ErrFleetUnavailable)
	case applied(msg, v):
		r.member.log.Info("a change no grain answered in time was applied, as read back", "volume", volumeIdentity(namespace, id), "change", describe(msg))
		return v, nil
	}
	return nil, model.Refusef(model.ErrFleetUnavailable, "%v; read back, it was not applied, and it never will be: retry once a member answers", gaveUp)
}

// settle makes the answer of a change that was sent more than once final:
// an earlier attempt may still be on its way to a grain (sent before a
// topology change, or given up on), and would apply the change again
// after whatever the caller does next, a release after a claim, say. The
// request's tombstone stops every attempt still out; a refusal is then
// checked against the volume read back, as an earlier attempt may have
// applied the change before. When the tombstone cannot be written, the
// outcome is unknown (model.ErrOutcomeUnknown).
func (r *Router) settle(namespace, id string, msg proto.Message, request string, v *model.CSIVolume, answer error) (*model.CSIVolume, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.member.cfg.Fleet.RequestTimeout)
	defer cancel()
	store := r.member.store.Load()
	err := errNoStore
	if store != nil {
		err = store.AbandonRequest(ctx, request)
	}
	if err != nil {
		return nil, errclass.Also(model.Refusef(model.ErrOutcomeUnknown,
			"%s of volume %s was answered after more than one attempt, and the others cannot be stopped (%v): sending the same request again is safe",
			describe(msg), volumeIdentity(namespace, id), err), model.ErrFleetUnavailable)
	}
	if answer == nil || errors.Is(answer, fleet.ErrRequestAbandoned) {
		return v, answer
	}
	got, err := store.GetVolume(ctx, namespace, id)
	if errors.Is(err, model.ErrVolumeNotFound) {
		got, err = nil, nil
	}
	if err == nil && applied(msg, got) {
		return got, nil
	}
	return nil, answer
}

// applied reports whether v (nil: no such volume), read back after the
// request was abandoned, shows what msg asked for: every change is safe to
// send again, so what it asks for being there is its success.
func applied(msg proto.Message, v *model.CSIVolume) bool {
	switch msg.(type) {
	case *messages.FleetDeregisterVolume:
		return v == nil
	case *messages.FleetRegisterVolume:
		return v != nil
	}
	if v == nil {
		return false
	}
	switch m := msg.(type) {
	case *messages.FleetClaimVolume:
		c := model.ClaimFromProto(m.GetClaim())
		held := v.WriteClaims[c.AllocID]
		if c.Mode == model.ClaimModeRead {
			held = v.ReadClaims[c.AllocID]
		}
		return held != nil && held.NodeID == c.NodeID
	case *messages.FleetReleaseVolume:
		c := model.ClaimFromProto(m.GetClaim())
		if c.State == "" || c.State == model.ClaimStateReadyToFree {
			return !slices.Contains(v.Claimants(), c.AllocID)
		}
		past := v.PastClaims[c.AllocID]
		return past != nil && past.State == c.State
	case *messages.FleetMarkVolumeDeleting:
		return v.Deleting
	case *messages.FleetRecordVolumeCapacity:
		return v.CapacityBytes == m.GetCapacityBytes()
	case *messages.FleetAttachVolume:
		return v.Attachments[m.GetAttachment().GetNodeId()] != nil
	case *messages.FleetMarkDetaching:
		a := v.Attachments[m.GetNodeId()]
		return a != nil && a.State == model.AttachmentStateDetaching
	case *messages.FleetDetachVolume:
		return v.Attachments[m.GetNodeId()] == nil
	}
	return false
}

// newRequestID is a random request ID.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// stampRequest sets msg's request_id (every grain request has one).
func stampRequest(msg proto.Message, id string) {
	m := msg.ProtoReflect()
	if fd := m.Descriptor().Fields().ByName("request_id"); fd != nil {
		m.Set(fd, protoreflect.ValueOfString(id))
	}
}

// firstWait is the pause of a Router before it sends a request again.
const firstWait = 20 * time.Millisecond

// pause waits d, or less when the topology changes meanwhile (changed
// closes): a request that waits for a dead member to leave goes to the
// grain's new member as soon as the others see it leave, not at the end
// of its pause. It reports whether ctx is still live.
func pause(ctx context.Context, d time.Duration, changed <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-changed:
		return true
	case <-t.C:
		return true
	}
}

// errTopologyChanged: the topology changed while a request was out; it is
// sent again to whichever member hosts the grain now.
var errTopologyChanged = errclass.New(errclass.Unavailable, "the cluster's topology changed")

// errNoStore: the member has not reached etcd yet, so a change's outcome
// cannot be read back.
var errNoStore = errclass.New(errclass.Unavailable, "the member has not reached etcd yet")

// errJoining: the member is joining the cluster again, and its new
// incarnation has not started; the request waits for it.
var errJoining = errclass.New(errclass.Unavailable, "this member is joining the cluster again")

// send sends msg to the grain once. It gives up on the answer when the
// topology changes meanwhile (changed closes): the grain's member may be the one that left,
// and it would not answer before the timeout. The request goes on, to end
// at its own timeout, which the member's Stop waits for.
func (r *Router) send(ctx context.Context, identity string, msg proto.Message, timeout time.Duration, changed <-chan struct{}) (any, error) {
	type result struct {
		res any
		err error
	}
	c := r.member.Cluster()
	if c == nil {
		return nil, errJoining
	}
	done := make(chan result, 1)
	r.sending.Add(1)
	go func() {
		defer r.sending.Done()
		res, err := c.Request(identity, VolumeKind, msg, cluster.WithTimeout(timeout))
		done <- result{res, err}
	}()
	select {
	case out := <-done:
		return out.res, out.err
	case <-changed:
		return nil, errTopologyChanged
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// answered turns a grain's answer into the result of a change.
func answered(answer *messages.FleetVolumeResponse, msg proto.Message, attempt int) (*model.CSIVolume, error) {
	err := messages.ErrorFromProto(answer.GetError())
	if _, ok := msg.(*messages.FleetDeregisterVolume); ok && attempt > 1 && errors.Is(err, model.ErrVolumeNotFound) {
		err = nil
	}
	if err != nil {
		return nil, err
	}
	if answer.GetVolume() == nil {
		return nil, nil
	}
	return model.VolumeFromProto(answer.GetVolume()), nil
}
