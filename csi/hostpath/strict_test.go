package hostpath_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/plugvisor/plugvisor/csi/hostpath"
)

// The strict rules of the driver, each refused with its gRPC code, as the
// drivers of real disks refuse them.

func TestAVolumeIsStagedOncePerNode(t *testing.T) {
	p, id, staging := stagedVolume(t, config(t))
	p.stage(t, id, staging) // the same path again is fine

	other := p.path("other-staging")
	_, err := p.node.NodeStageVolume(t.Context(), &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: other, VolumeCapability: writer})
	requireCode(t, codes.FailedPrecondition, err)
	require.Contains(t, err.Error(), "is already staged at "+staging)
	require.NoDirExists(t, other, "a refused stage leaves nothing behind")

	// A reader joins the writer at the one staging path instead.
	_, err = p.node.NodePublishVolume(t.Context(), publishReq(id, staging, p.path("writer"), false))
	require.NoError(t, err)
	_, err = p.node.NodePublishVolume(t.Context(), publishReq(id, staging, p.path("reader"), true))
	require.NoError(t, err)
	p.unpublish(t, id, p.path("writer"))
	p.unpublish(t, id, p.path("reader"))
}

func TestUnstageIsRefusedWhileAnyTargetIsPublished(t *testing.T) {
	p, id, staging := stagedVolume(t, config(t))
	one, two := p.path("one"), p.path("two")
	for _, target := range []string{one, two} {
		_, err := p.node.NodePublishVolume(t.Context(), publishReq(id, staging, target, false))
		require.NoError(t, err)
	}
	unstage := &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}
	_, err := p.node.NodeUnstageVolume(t.Context(), unstage)
	requireCode(t, codes.FailedPrecondition, err)

	p.unpublish(t, id, one)
	_, err = p.node.NodeUnstageVolume(t.Context(), unstage)
	requireCode(t, codes.FailedPrecondition, err)
	require.Contains(t, err.Error(), two, "the refusal names the target still published")

	p.unpublish(t, id, two)
	p.unstage(t, id, staging)
}

func TestPublishIsRefusedUnlessStagedAtTheGivenPath(t *testing.T) {
	p := serve(t, config(t))
	id := p.create(t, "v")
	target := p.path("target")
	tests := []struct {
		name, staging string
	}{
		{"no staging path: the driver advertises STAGE_UNSTAGE_VOLUME", ""},
		{"a staging path where the volume was never staged", p.path("staging")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := p.node.NodePublishVolume(t.Context(), publishReq(id, tt.staging, target, false))
			requireCode(t, codes.FailedPrecondition, err)
			require.NoDirExists(t, target)
		})
	}
	p.stage(t, id, p.path("staging"))
	t.Run("a staging path other than the one it is staged at", func(t *testing.T) {
		_, err := p.node.NodePublishVolume(t.Context(), publishReq(id, p.path("elsewhere"), target, false))
		requireCode(t, codes.FailedPrecondition, err)
		require.NoDirExists(t, target)
	})
}

// attachConfig is config with AttachRequired.
func attachConfig(t *testing.T) hostpath.Config {
	cfg := config(t)
	cfg.AttachRequired = true
	return cfg
}

func controllerPublishReq(id, node string, readonly bool) *csi.ControllerPublishVolumeRequest {
	return &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: node, VolumeCapability: writer, Readonly: readonly}
}

func (p *plugin) attach(t *testing.T, id, node string) map[string]string {
	t.Helper()
	resp, err := p.ctrl.ControllerPublishVolume(t.Context(), controllerPublishReq(id, node, false))
	require.NoError(t, err)
	return resp.GetPublishContext()
}

func (p *plugin) detach(t *testing.T, id, node string) {
	t.Helper()
	_, err := p.ctrl.ControllerUnpublishVolume(t.Context(), &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: node})
	require.NoError(t, err)
}

func stageReq(id, staging string, publishContext map[string]string) *csi.NodeStageVolumeRequest {
	return &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: writer, PublishContext: publishContext}
}

func TestAttachRequiredRefusesNodeCallsBeforeAttach(t *testing.T) {
	p := serve(t, attachConfig(t))
	id := p.create(t, "v")
	staging, target := p.path("staging"), p.path("target")

	_, err := p.node.NodeStageVolume(t.Context(), stageReq(id, staging, nil))
	requireCode(t, codes.FailedPrecondition, err)
	require.Contains(t, err.Error(), "call ControllerPublishVolume first")

	pc := p.attach(t, id, "node-1")
	require.NotEmpty(t, pc[hostpath.PublishContextAttachmentID])
	require.Equal(t, "node-1", pc[hostpath.PublishContextNodeID])
	require.Equal(t, pc, p.attach(t, id, "node-1"), "attaching again returns the same publish context")

	_, err = p.node.NodeStageVolume(t.Context(), stageReq(id, staging, nil))
	requireCode(t, codes.InvalidArgument, err)
	require.Contains(t, err.Error(), hostpath.PublishContextAttachmentID)
	_, err = p.node.NodeStageVolume(t.Context(), stageReq(id, staging, map[string]string{hostpath.PublishContextAttachmentID: "forged", hostpath.PublishContextNodeID: "node-1"}))
	requireCode(t, codes.FailedPrecondition, err)
	require.NoDirExists(t, staging, "refused stages leave nothing behind")

	_, err = p.node.NodeStageVolume(t.Context(), stageReq(id, staging, pc))
	require.NoError(t, err)
	publish := publishReq(id, staging, target, false)
	_, err = p.node.NodePublishVolume(t.Context(), publish)
	requireCode(t, codes.InvalidArgument, err)
	publish.PublishContext = pc
	_, err = p.node.NodePublishVolume(t.Context(), publish)
	require.NoError(t, err)
	p.unpublish(t, id, target)
	p.unstage(t, id, staging)
	p.detach(t, id, "node-1")

	// Detached, the old publish context is stale, and so it stays after a
	// new attach: each attachment has its own ID.
	_, err = p.node.NodeStageVolume(t.Context(), stageReq(id, staging, pc))
	requireCode(t, codes.FailedPrecondition, err)
	fresh := p.attach(t, id, "node-1")
	require.NotEqual(t, pc[hostpath.PublishContextAttachmentID], fresh[hostpath.PublishContextAttachmentID])
	_, err = p.node.NodeStageVolume(t.Context(), stageReq(id, staging, pc))
	requireCode(t, codes.FailedPrecondition, err)
	_, err = p.node.NodeStageVolume(t.Context(), stageReq(id, staging, fresh))
	require.NoError(t, err)
	p.unstage(t, id, staging)
	p.detach(t, id, "node-1")
}

func TestAttachRequiredControllerRefusals(t *testing.T) {
	cfg := attachConfig(t)
	p := serve(t, cfg)
	second := cfg
	second.Mode, second.NodeID = hostpath.ModeNode, "node-2"
	node2 := serve(t, second) // a second node on the same root
	id := p.create(t, "v")
	staging := p.path("staging")

	_, err := p.ctrl.ControllerPublishVolume(t.Context(), controllerPublishReq(id, "no-such-node", false))
	requireCode(t, codes.NotFound, err)
	_, err = p.ctrl.ControllerPublishVolume(t.Context(), controllerPublishReq("no-such-volume", "node-1", false))
	requireCode(t, codes.NotFound, err)

	pc := p.attach(t, id, "node-1")
	_, err = p.ctrl.ControllerPublishVolume(t.Context(), controllerPublishReq(id, "node-2", false))
	requireCode(t, codes.FailedPrecondition, err)
	require.Contains(t, err.Error(), "is attached to node node-1")
	_, err = p.ctrl.ControllerPublishVolume(t.Context(), controllerPublishReq(id, "node-1", true))
	requireCode(t, codes.AlreadyExists, err)
	_, err = p.ctrl.DeleteVolume(t.Context(), &csi.DeleteVolumeRequest{VolumeId: id})
	requireCode(t, codes.FailedPrecondition, err)

	// node-2 is not where the volume is attached.
	_, err = node2.node.NodeStageVolume(t.Context(), stageReq(id, node2.path("staging"), pc))
	requireCode(t, codes.FailedPrecondition, err)

	list, err := p.ctrl.ListVolumes(t.Context(), &csi.ListVolumesRequest{})
	require.NoError(t, err)
	require.Equal(t, []string{"node-1"}, list.GetEntries()[0].GetStatus().GetPublishedNodeIds())

	_, err = p.node.NodeStageVolume(t.Context(), stageReq(id, staging, pc))
	require.NoError(t, err)
	unpublish := &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "node-1"}
	_, err = p.ctrl.ControllerUnpublishVolume(t.Context(), unpublish)
	requireCode(t, codes.FailedPrecondition, err) // still staged
	_, err = p.ctrl.ControllerUnpublishVolume(t.Context(), &csi.ControllerUnpublishVolumeRequest{VolumeId: id})
	requireCode(t, codes.FailedPrecondition, err) // no node: from every node, and it is still staged on one
	publish := publishReq(id, staging, p.path("target"), false)
	publish.PublishContext = pc
	_, err = p.node.NodePublishVolume(t.Context(), publish)
	require.NoError(t, err)
	_, err = p.ctrl.ControllerUnpublishVolume(t.Context(), unpublish)
	requireCode(t, codes.FailedPrecondition, err) // still published

	p.unpublish(t, id, p.path("target"))
	p.unstage(t, id, staging)
	p.detach(t, id, "node-1")
	p.detach(t, id, "node-1")               // detached already
	p.detach(t, "no-such-volume", "node-1") // nothing to detach
	p.detach(t, id, "no-such-node")
	p.attach(t, id, "node-2") // free for another node now
	p.detach(t, id, "")
	p.delete(t, id)
}

func TestAReadOnlyAttachmentIsPublishedReadOnly(t *testing.T) {
	cfg := attachConfig(t)
	cfg.SymlinkFallback = os.Geteuid() != 0
	p := serve(t, cfg)
	id := p.create(t, "v")
	resp, err := p.ctrl.ControllerPublishVolume(t.Context(), controllerPublishReq(id, "node-1", true))
	require.NoError(t, err)
	pc := resp.GetPublishContext()
	staging, target := p.path("staging"), p.path("target")
	_, err = p.node.NodeStageVolume(t.Context(), stageReq(id, staging, pc))
	require.NoError(t, err)

	publish := publishReq(id, staging, target, false)
	publish.PublishContext = pc
	_, err = p.node.NodePublishVolume(t.Context(), publish)
	requireCode(t, codes.FailedPrecondition, err)
	require.NoDirExists(t, target)

	if os.Geteuid() != 0 {
		t.Logf("read-only bind mounts need root (uid %d): the read-only publish itself is not tried", os.Geteuid())
		return
	}
	publish.Readonly = true
	_, err = p.node.NodePublishVolume(t.Context(), publish)
	require.NoError(t, err)
	require.ErrorIs(t, os.WriteFile(filepath.Join(target, "x"), nil, 0o600), syscall.EROFS)
	p.unpublish(t, id, target)
}

// TestAttachmentsStagesAndPublishesSurviveARestart serves a second driver on
// the root of the first, as a restarted plugin: it still refuses what the
// first would, and lets the volume go in order.
func TestAttachmentsStagesAndPublishesSurviveARestart(t *testing.T) {
	cfg := attachConfig(t)
	first := serve(t, cfg)
	id := first.create(t, "v")
	pc := first.attach(t, id, "node-1")
	staging, target := first.path("staging"), first.path("target")
	_, err := first.node.NodeStageVolume(t.Context(), stageReq(id, staging, pc))
	require.NoError(t, err)
	publish := publishReq(id, staging, target, false)
	publish.PublishContext = pc
	_, err = first.node.NodePublishVolume(t.Context(), publish)
	require.NoError(t, err)
	first.srv.Driver.Stop()

	second := serve(t, cfg)
	require.Equal(t, pc, second.attach(t, id, "node-1"), "the attachment is the same one")
	got, err := second.ctrl.ControllerGetVolume(t.Context(), &csi.ControllerGetVolumeRequest{VolumeId: id})
	require.NoError(t, err)
	require.Equal(t, []string{"node-1"}, got.GetStatus().GetPublishedNodeIds())
	_, err = second.node.NodeUnstageVolume(t.Context(), &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
	requireCode(t, codes.FailedPrecondition, err)
	_, err = second.ctrl.ControllerUnpublishVolume(t.Context(), &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "node-1"})
	requireCode(t, codes.FailedPrecondition, err)
	_, err = second.node.NodeStageVolume(t.Context(), stageReq(id, second.path("elsewhere"), pc))
	requireCode(t, codes.FailedPrecondition, err)

	second.unpublish(t, id, target)
	require.NoDirExists(t, target)
	second.unstage(t, id, staging)
	second.detach(t, id, "node-1")
	second.delete(t, id)
}

func TestCapabilitiesOfEachMode(t *testing.T) {
	base := []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES,
		csi.ControllerServiceCapability_RPC_GET_VOLUME,
		csi.ControllerServiceCapability_RPC_GET_VOLUME_HEALTH,
		csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
		csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
		csi.ControllerServiceCapability_RPC_GET_CAPACITY,
		csi.ControllerServiceCapability_RPC_MODIFY_VOLUME,
	}
	attach := append([]csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
		csi.ControllerServiceCapability_RPC_PUBLISH_READONLY,
	}, base...)
	node := []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
		csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,
		csi.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP,
	}
	for _, tt := range []struct {
		name string
		cfg  hostpath.Config
		want []csi.ControllerServiceCapability_RPC_Type
	}{
		{"the default mode", config(t), base},
		{"attach required", attachConfig(t), attach},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := serve(t, tt.cfg)
			ctrl, err := p.ctrl.ControllerGetCapabilities(t.Context(), &csi.ControllerGetCapabilitiesRequest{})
			require.NoError(t, err)
			var got []csi.ControllerServiceCapability_RPC_Type
			for _, c := range ctrl.GetCapabilities() {
				got = append(got, c.GetRpc().GetType())
			}
			require.ElementsMatch(t, tt.want, got)
			nodeCaps, err := p.node.NodeGetCapabilities(t.Context(), &csi.NodeGetCapabilitiesRequest{})
			require.NoError(t, err)
			var gotNode []csi.NodeServiceCapability_RPC_Type
			for _, c := range nodeCaps.GetCapabilities() {
				gotNode = append(gotNode, c.GetRpc().GetType())
			}
			require.ElementsMatch(t, node, gotNode)
		})
	}
}
