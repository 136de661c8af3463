package catalog

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/names"
)

// In cluster mode (Config.Fleet set), the catalog actor defers every
// command and query on volumes and claims, and the plugin listing, to the
// Fleet: each runs on a goroutine and its answer comes back to the actor
// as a fleetAnswered, which the actor sends on. Nothing is answered from
// the actor's own state, so every path (the facade, the agent's adapter,
// actors that send ClaimVolume directly) reaches the cluster-wide catalog.
// Bad input is refused by the Fleet with the same errors as here.
//
// Fingerprints are still applied to the local state (its plugins), and the
// latest fingerprint of each of this node's plugin services is forwarded
// to Fleet.PutFingerprints: one call in flight, the next one carrying
// whatever changed meanwhile; a failed call is tried again after
// fleetRetryDelay. Shutdown waits for the calls in flight.

// fleetRetryDelay is the pause before fingerprints that the Fleet refused
// are sent again.
const fleetRetryDelay = time.Second

// fleetAnswered is sent to the catalog by the goroutine of a Fleet call.
type fleetAnswered struct {
	replyTo *actor.PID
	resp    proto.Message
}

// fleetFingerprintsPut is sent to the catalog when a PutFingerprints returned.
type fleetFingerprintsPut struct{ err error }

// fleetState is the catalog actor's part in cluster mode.
type fleetState struct {
	fleet  model.Fleet
	ctx    context.Context
	cancel context.CancelFunc
	calls  int // Fleet calls in flight, answers not yet sent

	// fps is the latest fingerprint of each of this node's plugin
	// services, by type and plugin; dirty when the Fleet has not got it.
	fps     map[string]*messages.CSIFingerprint
	dirty   bool
	putting bool
}

func newFleetState(f model.Fleet) *fleetState {
	ctx, cancel := context.WithCancel(context.Background())
	return &fleetState{fleet: f, ctx: ctx, cancel: cancel, fps: map[string]*messages.CSIFingerprint{}}
}

// topologyRefusal is, in cluster mode, the refusal of a registration
// (single or batch) of a volume without topology whose plugin, as this
// node has fingerprinted it, requires one (model.TopologyRefusal); nil for
// any other command. It refuses early, without a call; the Fleet checks
// again against every live node's fingerprints of the plugin.
func (a *catalogActor) topologyRefusal(cmd proto.Message) error {
	var vs []*messages.CatalogVolume
	_, batch := cmd.(*messages.RegisterVolumes)
	switch cmd := cmd.(type) {
	case *messages.RegisterVolume:
		vs = []*messages.CatalogVolume{cmd.GetVolume()}
	case *messages.RegisterVolumes:
		vs = cmd.GetVolumes()
	}
	volumes := make([]*model.CSIVolume, len(vs))
	for i, m := range vs {
		volumes[i] = model.VolumeFromProto(m)
	}
	return model.TopologyRefusal(volumes, a.state.plugins, batch)
}

// deferToFleet runs cmd against the Fleet on a goroutine; it reports
// whether cmd is one the Fleet takes.
func (a *catalogActor) deferToFleet(ctx actor.Context, cmd proto.Message, replyTo *actor.PID) bool {
	call := a.fleetCall(cmd)
	if call == nil {
		return false
	}
	replyTo = cmp.Or(replyTo, ctx.Sender())
	if a.closing {
		a.fleetReply(ctx, replyTo, fleetResponse(cmd, nil, model.Refusef(ErrShutdown, "the request came while it was stopping")))
		return true
	}
	a.cluster.calls++
	root, self, fctx := ctx.ActorSystem().Root, ctx.Self(), a.cluster.ctx
	go func() { root.Send(self, &fleetAnswered{replyTo: replyTo, resp: call(fctx)}) }()
	return true
}

func (a *catalogActor) onFleetAnswered(ctx actor.Context, msg *fleetAnswered) {
	a.cluster.calls = max(0, a.cluster.calls-1) // an instance restarted after a panic counts from 0
	a.fleetReply(ctx, msg.replyTo, msg.resp)
	a.finishShutdown(ctx)
}

func (a *catalogActor) fleetReply(ctx actor.Context, replyTo *actor.PID, resp proto.Message) {
	if replyTo != nil {
		ctx.Send(replyTo, resp)
	}
}

// fleetCall is the Fleet call of cmd, which returns its answer; nil when
// the Fleet does not take cmd.
func (a *catalogActor) fleetCall(cmd proto.Message) func(context.Context) proto.Message {
	f, nodeID := a.cluster.fleet, a.nodeID
	if call := batchFleetCall(f, cmd); call != nil {
		return call
	}
	if call := modifyFleetCall(f, cmd); call != nil {
		return call
	}
	switch cmd := cmd.(type) {
	case *messages.RegisterVolume:
		return func(ctx context.Context) proto.Message {
			v, err := f.RegisterVolume(ctx, model.VolumeFromProto(cmd.GetVolume()))
			return fleetResponse(cmd, v, err)
		}
	case *messages.DeregisterVolume:
		return func(ctx context.Context) proto.Message {
			return fleetResponse(cmd, nil, f.DeregisterVolume(ctx, cmd.GetNamespace(), cmd.GetVolumeId()))
		}
	case *messages.ClaimVolume:
		return func(ctx context.Context) proto.Message {
			v, err := fleetClaim(ctx, f, nodeID, cmd)
			return fleetResponse(cmd, v, err)
		}
	case *messages.ReleaseVolume:
		claim := &model.Claim{AllocID: cmd.GetAllocId(), NodeID: nodeID, State: model.ClaimState(cmd.GetState()),
			LastError: lastErrorOf(cmd.GetLastError())}
		return func(ctx context.Context) proto.Message {
			v, err := f.Release(ctx, cmd.GetNamespace(), cmd.GetVolumeId(), claim)
			return fleetResponse(cmd, v, err)
		}
	case *messages.MarkVolumeDeleting:
		return func(ctx context.Context) proto.Message {
			v, err := f.MarkVolumeDeleting(ctx, cmd.GetNamespace(), cmd.GetVolumeId())
			return fleetResponse(cmd, v, err)
		}
	case *messages.RecordVolumeCapacity:
		return func(ctx context.Context) proto.Message {
			v, err := f.RecordVolumeCapacity(ctx, cmd.GetNamespace(), cmd.GetVolumeId(), cmd.GetCapacityBytes())
			return fleetResponse(cmd, v, err)
		}
	}
	return fleetQuery(f, cmd)
}

// fleetQuery is the Fleet call of a query, which returns its answer; nil
// when cmd is no query the Fleet takes.
func fleetQuery(f model.Fleet, cmd proto.Message) func(context.Context) proto.Message {
	switch cmd := cmd.(type) {
	case *messages.GetVolumeRequest:
		return func(ctx context.Context) proto.Message {
			v, err := f.GetVolume(ctx, cmd.GetNamespace(), cmd.GetVolumeId())
			return fleetResponse(cmd, v, err)
		}
	case *messages.ListVolumesRequest:
		return func(ctx context.Context) proto.Message {
			stubs, err := f.ListVolumes(ctx, cmd.GetNamespace())
			resp := &messages.ListVolumesResponse{Error: messages.ErrorToProto(err)}
			for _, s := range stubs {
				resp.Volumes = append(resp.Volumes, stubProto(s))
			}
			return resp
		}
	case *messages.ListCatalogPluginsRequest:
		return func(ctx context.Context) proto.Message {
			plugins, err := f.Plugins(ctx)
			resp := &messages.ListCatalogPluginsResponse{}
			if err != nil {
				resp.Error = messages.ErrorToProto(err)
			}
			for _, p := range plugins {
				resp.Plugins = append(resp.Plugins, p.Proto())
			}
			return resp
		}
	}
	return nil
}

// fleetClaim checks a claim on its face and against the plugin and modes
// it names, as the local catalog does, and has the Fleet apply it.
func fleetClaim(ctx context.Context, f model.Fleet, nodeID string, cmd *messages.ClaimVolume) (*model.CSIVolume, error) {
	claim := &model.Claim{
		AllocID: cmd.GetAllocId(),
		NodeID:  cmp.Or(cmd.GetNodeId(), nodeID),
		Mode:    model.ClaimMode(cmd.GetMode()),
		State:   model.ClaimStateTaken,
		// The capability the claim chooses; the model fills it in.
		AccessMode: model.AccessMode(cmd.GetAccessMode()), AttachmentMode: model.AttachmentMode(cmd.GetAttachmentMode()),
	}
	if err := cmp.Or(model.CheckClaim(claim), checkUsage(cmd)); err != nil {
		return nil, err
	}
	if cmd.GetPluginId() != "" || cmd.GetAccessMode() != "" || cmd.GetAttachmentMode() != "" {
		// A volume's plugin and modes change only while nobody holds a
		// claim, so checking them before the claim is as good as within it.
		v, err := f.GetVolume(ctx, cmd.GetNamespace(), cmd.GetVolumeId())
		if err == nil {
			err = usageConflict(v, cmd)
		}
		if err != nil {
			return nil, err
		}
	}
	return f.Claim(ctx, cmd.GetNamespace(), cmd.GetVolumeId(), claim)
}

// fleetResponse is the answer to cmd carrying v or err.
func fleetResponse(cmd proto.Message, v *model.CSIVolume, err error) proto.Message {
	answer := messages.ErrorToProto(err)
	var volume *messages.CatalogVolume
	if err == nil && v != nil {
		volume = v.Proto()
	}
	switch cmd.(type) {
	case *messages.RegisterVolume:
		return &messages.RegisterVolumeResponse{Error: answer, Volume: volume}
	case *messages.DeregisterVolume:
		return &messages.DeregisterVolumeResponse{Error: answer}
	case *messages.RegisterVolumes:
		return &messages.RegisterVolumesResponse{Error: answer}
	case *messages.DeregisterVolumes:
		return &messages.DeregisterVolumesResponse{Error: answer}
	case *messages.ClaimVolume:
		return &messages.ClaimVolumeResponse{Error: answer, Volume: volume}
	case *messages.ReleaseVolume:
		return &messages.ReleaseVolumeResponse{Error: answer, Volume: volume}
	case *messages.MarkVolumeDeleting:
		return &messages.MarkVolumeDeletingResponse{Error: answer, Volume: volume}
	case *messages.RecordVolumeCapacity:
		return &messages.RecordVolumeCapacityResponse{Error: answer, Volume: volume}
	case *messages.RecordVolumeModify:
		return &messages.RecordVolumeModifyResponse{Error: answer, Volume: volume}
	case *messages.GetVolumeRequest:
		return &messages.GetVolumeResponse{Error: answer, Volume: volume}
	case *messages.ListVolumesRequest:
		return &messages.ListVolumesResponse{Error: answer}
	case *messages.ListCatalogPluginsRequest:
		return &messages.ListCatalogPluginsResponse{Error: answer}
	}
	return nil
}

// stubProto is the protobuf form of a volume's list summary.
func stubProto(s *model.CSIVolumeStub) *messages.CatalogVolumeStub {
	v := &model.CSIVolume{
		ID: s.ID, Namespace: s.Namespace, PluginID: s.PluginID,
		AccessMode: s.AccessMode, AttachmentMode: s.AttachmentMode, Topologies: s.Topologies,
		Health: s.Health, ResourceExhausted: s.ResourceExhausted,
		CreateIndex: s.CreateIndex, ModifyIndex: s.ModifyIndex,
	}
	m := v.StubProto()
	m.CurrentReaders, m.CurrentWriters = int64(s.CurrentReaders), int64(s.CurrentWriters)
	return m
}

// forwardFingerprint keeps fp as the latest word of its plugin service on
// this node, unless it is the late final word of an instance that another
// instance has replaced (lateWord, as the local catalog decides), and sends
// this node's fingerprints to the Fleet. A fingerprint without
// capabilities goes with those the local catalog's record of it carries
// (model.FingerprintCarrying: the local catalog has just applied it), so
// the fleet keeps the plugin's topology requirement as this node does.
func (a *catalogActor) forwardFingerprint(ctx actor.Context, fp *messages.CSIFingerprint) {
	info, err := model.InstanceFromFingerprint(fp)
	if err != nil || names.Check("plugin name", info.PluginID) != nil {
		return // refused by the local catalog too
	}
	key := fp.GetType() + "/" + fp.GetName()
	if old := a.cluster.fps[key]; old != nil {
		if current, err := model.InstanceFromFingerprint(old); err == nil && lateWord(current, info) {
			return
		}
	}
	a.cluster.fps[key] = model.FingerprintCarrying(fp, recordOn(a.state.plugins[info.PluginID], a.nodeID, info))
	a.cluster.dirty = true
	a.putFingerprints(ctx)
}

// putFingerprints sends this node's fingerprints to the Fleet, unless a
// call is in flight (its answer sends what changed meanwhile).
func (a *catalogActor) putFingerprints(ctx actor.Context) {
	c := a.cluster
	if c.putting || !c.dirty || a.closing {
		return
	}
	c.putting, c.dirty = true, false
	fps := make([]*messages.CSIFingerprint, 0, len(c.fps))
	for _, key := range slices.Sorted(maps.Keys(c.fps)) {
		fps = append(fps, c.fps[key])
	}
	c.calls++
	f, fctx, root, self := c.fleet, c.ctx, ctx.ActorSystem().Root, ctx.Self()
	go func() {
		err := f.PutFingerprints(fctx, fps)
		if err != nil {
			select {
			case <-fctx.Done():
			case <-time.After(fleetRetryDelay):
			}
		}
		root.Send(self, &fleetFingerprintsPut{err: err})
	}()
}

func (a *catalogActor) onFleetFingerprintsPut(ctx actor.Context, msg *fleetFingerprintsPut) {
	c := a.cluster
	c.calls = max(0, c.calls-1)
	c.putting = false
	if msg.err != nil {
		c.dirty = true
		if !a.closing {
			a.log.Warn("the cluster-wide catalog did not take this node's fingerprints; trying again", "error", msg.err)
		}
	}
	a.putFingerprints(ctx)
	a.finishShutdown(ctx)
}
