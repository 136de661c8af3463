package member

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/messages"
)

// grainTimeout bounds each step on a loaded machine.
const grainTimeout = 30 * time.Second

// openStore opens node's fleet.Store on s, with plugin "ebs" healthy on the
// node; it closes with the test.
func openStore(t *testing.T, s *etcdtest.Server, node string) *fleet.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), grainTimeout)
	defer cancel()
	st, err := fleet.Open(ctx, fleet.Config{Endpoints: s.Endpoints(), NodeID: node, LeaseTTL: fleet.MinLeaseTTL})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	require.NoError(t, st.PutFingerprints(ctx, []*messages.CSIFingerprint{{
		Type: "csi-node", Name: "ebs", AllocId: "plugin-" + node, Healthy: true,
		NodeInfo: &messages.CSINodeInfo{NodeId: "csi-" + node},
	}}))
	return st
}

// spawnGrain starts a volume grain for volume id of the default namespace
// outside any cluster, as disthash would on a member.
func spawnGrain(system *actor.ActorSystem, st model.Fleet, member, id string) *actor.PID {
	return spawnKeyedGrain(system, st, nil, member, id)
}

// spawnKeyedGrain is spawnGrain of a grain that takes only requests that
// keyring signed.
func spawnKeyedGrain(system *actor.ActorSystem, st model.Fleet, keyring *fleet.Keyring, member, id string) *actor.PID {
	props := volumeProps(func() model.Fleet { return st }, keyring, member, grainTimeout, time.Hour, hclog.NewNullLogger())
	props = cluster.WithClusterIdentity(props, cluster.NewClusterIdentity(volumeIdentity(model.DefaultNamespace, id), VolumeKind))
	return system.Root.Spawn(props)
}

// TestTwoActivationsOfOneVolumeNeverGiveTwoWriters is the topology change
// disthash can make: two grains of one volume on two members at once,
// each claiming for another node. etcd's transaction lets one win.
func TestTwoActivationsOfOneVolumeNeverGiveTwoWriters(t *testing.T) {
	s := etcdtest.Start(t)
	a, b := openStore(t, s, "a"), openStore(t, s, "b")
	system := probe.NewSystem(t)

	for round := range 200 {
		// A deadline per round, not one for all of them: a loaded machine
		// makes the two hundred slow, not any one of them.
		ctx, cancel := context.WithTimeout(context.Background(), grainTimeout)
		defer cancel()
		id := fmt.Sprintf("vol-%d", round)
		registerVolume(ctx, t, a, id, model.AccessModeSingleNodeWriter)

		grains := []*actor.PID{spawnGrain(system, a, "member-a", id), spawnGrain(system, b, "member-b", id)}
		futures := make([]*actor.Future, 2)
		for i, node := range []string{"a", "b"} {
			claim := &model.Claim{AllocID: "alloc-" + node, NodeID: node, Mode: model.ClaimModeWrite, State: model.ClaimStateTaken}
			futures[i] = system.Root.RequestFuture(grains[i], &messages.FleetClaimVolume{Claim: model.ClaimToProto(claim)}, grainTimeout)
		}
		won := 0
		for i, f := range futures {
			res, err := f.Result()
			require.NoError(t, err)
			answer := res.(*messages.FleetVolumeResponse)
			require.Equal(t, []string{"member-a", "member-b"}[i], answer.GetMember())
			if answer.GetError() == nil {
				won++
			} else {
				require.ErrorIs(t, messages.ErrorFromProto(answer.GetError()), model.ErrVolumeMaxClaims)
			}
		}
		require.Equal(t, 1, won, "round %d: exactly one activation's claim wins", round)
		got, err := b.GetVolume(ctx, model.DefaultNamespace, id)
		require.NoError(t, err)
		require.Len(t, got.WriteClaims, 1)
		for _, g := range grains {
			require.NoError(t, system.Root.PoisonFuture(g).Wait())
		}
	}
}

func TestAGrainRunsItsVolumesRequestsInOrderAndRefusesAnotherVolume(t *testing.T) {
	s := etcdtest.Start(t)
	st := openStore(t, s, "a")
	system := probe.NewSystem(t)
	ctx, cancel := context.WithTimeout(context.Background(), grainTimeout)
	defer cancel()
	registerVolume(ctx, t, st, "vol", model.AccessModeMultiNodeMultiWriter)
	grain := spawnGrain(system, st, "m", "vol")

	// Claims sent back to back, then a release of the first: in order,
	// the release finds the claim it frees.
	var futures []*actor.Future
	var err error
	for i := range 20 {
		claim := &model.Claim{AllocID: fmt.Sprintf("alloc-%d", i), NodeID: "a", Mode: model.ClaimModeWrite, State: model.ClaimStateTaken}
		futures = append(futures, system.Root.RequestFuture(grain, &messages.FleetClaimVolume{Claim: model.ClaimToProto(claim)}, grainTimeout))
	}
	release := &model.Claim{AllocID: "alloc-0", State: model.ClaimStateReadyToFree}
	futures = append(futures, system.Root.RequestFuture(grain, &messages.FleetReleaseVolume{Claim: model.ClaimToProto(release)}, grainTimeout))
	var last *messages.FleetVolumeResponse
	for _, f := range futures {
		res, err := f.Result()
		require.NoError(t, err)
		last = res.(*messages.FleetVolumeResponse)
		require.Nil(t, last.GetError())
	}
	require.Len(t, model.VolumeFromProto(last.GetVolume()).WriteClaims, 19, "20 claims, then the first released")

	other := model.NewCSIVolume("other", 0)
	other.Namespace, other.PluginID = model.DefaultNamespace, "ebs"
	other.AccessMode, other.AttachmentMode = model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem
	res, err := system.Root.RequestFuture(grain, &messages.FleetRegisterVolume{Volume: other.Proto()}, grainTimeout).Result()
	require.NoError(t, err)
	require.ErrorIs(t, messages.ErrorFromProto(res.(*messages.FleetVolumeResponse).GetError()), model.ErrInvalid)
	_, err = st.GetVolume(ctx, model.DefaultNamespace, "other")
	require.ErrorIs(t, err, model.ErrVolumeNotFound, "the grain of vol registered nothing else")
}

// TestAGrainRecordsAndRemovesAttachments sends a grain an attachment, a
// second node's attachment of its single-node volume, and a detach: the
// second is refused with the model's sentinel across the answer, and the
// detach frees the volume for it.
func TestAGrainRecordsAndRemovesAttachments(t *testing.T) {
	s := etcdtest.Start(t)
	st := openStore(t, s, "a")
	system := probe.NewSystem(t)
	ctx, cancel := context.WithTimeout(context.Background(), grainTimeout)
	defer cancel()
	registerVolume(ctx, t, st, "vol", model.AccessModeSingleNodeWriter)
	grain := spawnGrain(system, st, "m", "vol")
	ask := func(msg any) (*model.CSIVolume, error) {
		res, err := system.Root.RequestFuture(grain, msg, grainTimeout).Result()
		require.NoError(t, err)
		answer := res.(*messages.FleetVolumeResponse)
		if answer.GetVolume() == nil {
			return nil, messages.ErrorFromProto(answer.GetError())
		}
		return model.VolumeFromProto(answer.GetVolume()), messages.ErrorFromProto(answer.GetError())
	}
	attach := func(node string) *messages.FleetAttachVolume {
		return &messages.FleetAttachVolume{Attachment: model.AttachmentToProto(
			&model.Attachment{NodeID: node, ExternalNodeID: "csi-" + node, State: model.AttachmentStateAttached})}
	}
	claim := func(alloc, node string) *messages.FleetClaimVolume {
		return &messages.FleetClaimVolume{Claim: model.ClaimToProto(&model.Claim{AllocID: alloc, NodeID: node, Mode: model.ClaimModeWrite, State: model.ClaimStateTaken})}
	}

	_, err := ask(claim("alloc-a", "a"))
	require.NoError(t, err)
	got, err := ask(attach("a"))
	require.NoError(t, err)
	require.Contains(t, got.Attachments, "a")
	_, err = ask(&messages.FleetReleaseVolume{Claim: model.ClaimToProto(&model.Claim{AllocID: "alloc-a", State: model.ClaimStateReadyToFree})})
	require.NoError(t, err)
	_, err = ask(claim("alloc-b", "b"))
	require.NoError(t, err)
	_, err = ask(attach("b"))
	require.ErrorIs(t, err, model.ErrAttachConflict)
	_, err = ask(&messages.FleetMarkDetaching{NodeId: "a"})
	require.ErrorIs(t, err, model.ErrVolumeInUse, "node a is up: its attachment is not another node's to detach")
	got, err = ask(&messages.FleetDetachVolume{NodeId: "a"})
	require.NoError(t, err)
	require.Empty(t, got.Attachments)
	got, err = ask(attach("b"))
	require.NoError(t, err)
	require.Contains(t, got.Attachments, "b")
}

// registerVolume registers volume id of plugin "ebs" in the default
// namespace with access mode mode.
func registerVolume(ctx context.Context, t *testing.T, st *fleet.Store, id string, mode model.AccessMode) {
	t.Helper()
	v := model.NewCSIVolume(id, 0)
	v.Namespace, v.PluginID = model.DefaultNamespace, "ebs"
	v.AccessMode, v.AttachmentMode = mode, model.AttachmentModeFileSystem
	_, err := st.RegisterVolume(ctx, v)
	require.NoError(t, err)
}
