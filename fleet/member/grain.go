package member

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/messages"
)

// VolumeKind is the cluster kind of the volume grains.
const VolumeKind = "volume"

// volumeIdentity is the grain identity of a volume: "<namespace>/<id>".
// Neither part can hold a "/" (names.Check refuses separators).
func volumeIdentity(namespace, id string) string { return namespace + "/" + id }

// volumeGrain is the grain of one volume. It runs the requests for its
// volume one at a time, each on a goroutine that changes the volume with a
// transaction in etcd (fleet.Store), and answers when that returns.
// Requests that arrive meanwhile wait in its queue, in order. It keeps the
// volume's record as its last claim or release wrote or read it
// (fleet.VolumeCache), so that the next one writes in one round trip,
// guarded on the record's mod revision: etcd stays the volume's truth, and
// a write by anyone else in between makes the guard fail and the change
// start again from what etcd holds.
//
// A grain that has had no request for its idle timeout, with none queued
// or in flight, stops (passivates): a member's grains follow the volumes
// in use, not every volume ever touched. The next request activates it
// again, and it reads the volume from etcd as every request does. A
// request sent in the instant the grain stops is not answered; its
// caller sends it again, as below.
//
// What it keeps: the queue, the request in flight and the cache. When
// the topology changes, disthash may briefly run a second activation of the
// same volume on another member; both then go to etcd, whose transactions
// on the volume's mod revision let only one of two conflicting changes
// win. A grain that stops with requests queued or in flight answers none of
// them: their callers time out and send again, which is safe (see
// messages/fleet.proto).
type volumeGrain struct {
	store   func() model.Fleet
	keyring *fleet.Keyring
	member  string
	timeout time.Duration
	idle    time.Duration
	log     hclog.Logger

	namespace, id string
	queue         []grainRequest
	busy          bool
	// cache is used by the goroutine of the request in flight only: the
	// next starts after the last ended (grainDone).
	cache fleet.VolumeCache
}

// grainRequest is a request waiting for its turn, with whom to answer.
type grainRequest struct {
	msg     proto.Message
	replyTo *actor.PID
}

// grainDone is what the goroutine of a request sends back to its grain.
type grainDone struct {
	replyTo *actor.PID
	answer  *messages.FleetVolumeResponse
}

// volumeProps are the props of the grains that apply requests to the
// store that store returns, when keyring (nil: none) signed them; member is the ID of the member they run on,
// timeout bounds each request's work in etcd, idle is how long a grain
// waits for a request before it stops. The cluster kind is
// cluster.NewKind(VolumeKind, volumeProps(...)).
func volumeProps(store func() model.Fleet, keyring *fleet.Keyring, member string, timeout, idle time.Duration, log hclog.Logger) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &volumeGrain{store: store, keyring: keyring, member: member, timeout: timeout, idle: idle, log: log}
	})
}

// Receive dispatches the grain's messages.
func (g *volumeGrain) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		g.onStarted(ctx)
	case *messages.FleetClaimVolume, *messages.FleetReleaseVolume, *messages.FleetRegisterVolume,
		*messages.FleetDeregisterVolume, *messages.FleetMarkVolumeDeleting, *messages.FleetRecordVolumeCapacity,
		*messages.FleetAttachVolume, *messages.FleetMarkDetaching, *messages.FleetDetachVolume:
		g.onRequest(ctx, msg.(proto.Message))
	case *grainDone:
		g.onDone(ctx, msg)
	case *actor.ReceiveTimeout:
		g.onIdle(ctx)
	}
}

// onStarted learns which volume the grain is for from its identity, and
// starts its idle timer.
func (g *volumeGrain) onStarted(ctx actor.Context) {
	identity := cluster.GetClusterIdentity(ctx).GetIdentity()
	g.namespace, g.id, _ = strings.Cut(identity, "/")
	ctx.SetReceiveTimeout(g.idle)
}

// onIdle stops the grain when nothing is queued or in flight (its
// placement forgets it, and the next request activates it again); else it
// waits another idle timeout.
func (g *volumeGrain) onIdle(ctx actor.Context) {
	if g.busy || len(g.queue) > 0 {
		ctx.SetReceiveTimeout(g.idle)
		return
	}
	ctx.Stop(ctx.Self())
}

func (g *volumeGrain) onRequest(ctx actor.Context, msg proto.Message) {
	g.queue = append(g.queue, grainRequest{msg: msg, replyTo: ctx.Sender()})
	g.next(ctx)
}

func (g *volumeGrain) onDone(ctx actor.Context, msg *grainDone) {
	g.busy = false
	if msg.replyTo != nil {
		ctx.Send(msg.replyTo, msg.answer)
	}
	g.next(ctx)
}

// next starts the first queued request unless one is in flight.
func (g *volumeGrain) next(ctx actor.Context) {
	if g.busy || len(g.queue) == 0 {
		return
	}
	req := g.queue[0]
	g.queue[0] = grainRequest{}
	g.queue = g.queue[1:]
	g.busy = true
	root, self := ctx.ActorSystem().Root, ctx.Self()
	go func() {
		answer := g.apply(req.msg)
		root.Send(self, &grainDone{replyTo: req.replyTo, answer: answer})
	}()
}

// apply runs one request against etcd. It reads only fields that do not
// change after Started, and the cache, which no other goroutine uses
// meanwhile, so it is safe on its goroutine.
func (g *volumeGrain) apply(msg proto.Message) *messages.FleetVolumeResponse {
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	if err := checkSignature(g.keyring, msg); err != nil {
		g.log.Warn("refused a volume change that no key of the fleet's keyring signed", "volume", volumeIdentity(g.namespace, g.id), "error", err)
		return &messages.FleetVolumeResponse{Error: messages.ErrorToProto(err), Member: g.member}
	}
	if r, ok := msg.(interface{ GetRequestId() string }); ok {
		ctx = fleet.WithRequest(ctx, r.GetRequestId())
	}
	var v *model.CSIVolume
	var err error
	store := g.store()
	if store == nil {
		// The member's incarnation has not reached etcd yet (it rejoins).
		return &messages.FleetVolumeResponse{Error: messages.ErrorToProto(errNoStore), Member: g.member}
	}
	if c, ok := store.(cacher); ok {
		store = c.Cached(&g.cache)
	}
	switch m := msg.(type) {
	case *messages.FleetClaimVolume:
		v, err = store.Claim(ctx, g.namespace, g.id, model.ClaimFromProto(m.GetClaim()))
	case *messages.FleetReleaseVolume:
		v, err = store.Release(ctx, g.namespace, g.id, model.ClaimFromProto(m.GetClaim()))
	case *messages.FleetRegisterVolume:
		v, err = g.register(ctx, store, m.GetVolume())
	case *messages.FleetDeregisterVolume:
		err = store.DeregisterVolume(ctx, g.namespace, g.id)
	case *messages.FleetMarkVolumeDeleting:
		v, err = store.MarkVolumeDeleting(ctx, g.namespace, g.id)
	case *messages.FleetRecordVolumeCapacity:
		v, err = store.RecordVolumeCapacity(ctx, g.namespace, g.id, m.GetCapacityBytes())
	case *messages.FleetAttachVolume:
		v, err = store.Attach(ctx, g.namespace, g.id, model.AttachmentFromProto(m.GetAttachment()))
	case *messages.FleetMarkDetaching:
		v, err = store.MarkDetaching(ctx, g.namespace, g.id, m.GetNodeId())
	case *messages.FleetDetachVolume:
		v, err = store.Detach(ctx, g.namespace, g.id, m.GetNodeId())
	}
	if err != nil {
		g.log.Debug("volume request refused", "volume", volumeIdentity(g.namespace, g.id), "error", err)
	}
	answer := &messages.FleetVolumeResponse{Error: messages.ErrorToProto(err), Member: g.member}
	if v != nil {
		answer.Volume = v.Proto()
	}
	return answer
}

// register registers the volume the request describes, which must be the
// grain's own.
func (g *volumeGrain) register(ctx context.Context, store model.Fleet, m *messages.CatalogVolume) (*model.CSIVolume, error) {
	v := model.VolumeFromProto(m)
	if v.Namespace != g.namespace || v.ID != g.id {
		return nil, model.Refusef(model.ErrInvalid,
			"the grain of volume %s was sent the volume %s", volumeIdentity(g.namespace, g.id), volumeIdentity(v.Namespace, v.ID))
	}
	return store.RegisterVolume(ctx, v)
}

// cacher is a model.Fleet whose changes of a volume can start from what
// the volume's grain keeps of it (fleet.Store).
type cacher interface {
	Cached(*fleet.VolumeCache) model.Fleet
}

// describe names a request in errors and logs.
func describe(msg proto.Message) string {
	return fmt.Sprintf("%T", msg)[len("*messages."):]
}
