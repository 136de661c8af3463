package volumes_test

import (
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"go.uber.org/mock/gomock"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/volumes"
)

// setCapabilities gives volume id of the default namespace caps.
func (c *modelCatalog) setCapabilities(id string, caps ...model.RequestedCapability) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.volumes["default/"+id].SetCapabilities(caps)
}

// capabilityIs matches a request whose volume capability has the access
// mode and fs type given.
func capabilityIs(access csipb.VolumeCapability_AccessMode_Mode, fsType string) gomock.Matcher {
	return gomock.Cond(func(x any) bool {
		r, ok := x.(interface {
			GetVolumeCapability() *csipb.VolumeCapability
		})
		return ok && r.GetVolumeCapability().GetAccessMode().GetMode() == access && r.GetVolumeCapability().GetMount().GetFsType() == fsType
	})
}

func TestAMountStagesAndPublishesWithTheCapabilityItsClaimChose(t *testing.T) {
	n := newNode(t, nil)
	n.catalog.add("vol", "vol", "mock", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem)
	n.catalog.setCapabilities("vol",
		model.RequestedCapability{AccessMode: model.AccessModeSingleNodeWriter, AttachmentMode: model.AttachmentModeFileSystem, FSType: "ext4"},
		model.RequestedCapability{AccessMode: model.AccessModeMultiNodeReader, AttachmentMode: model.AttachmentModeFileSystem, FSType: "xfs"})
	m := newMockPlugin(t, n, true, false)
	reader := csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
	// The capability queries may come any time; the volume RPCs are these.
	m.nodeCaps().AnyTimes()
	m.controllerCaps().AnyTimes()
	gomock.InOrder(
		m.Node.EXPECT().NodeStageVolume(gomock.Any(), capabilityIs(reader, "xfs")).Return(&csipb.NodeStageVolumeResponse{}, nil),
		m.Node.EXPECT().NodePublishVolume(gomock.Any(), gomock.All(capabilityIs(reader, "xfs"),
			gomock.Cond(func(x any) bool { return x.(*csipb.NodePublishVolumeRequest).GetReadonly() }))).
			Return(&csipb.NodePublishVolumeResponse{}, nil),
	)
	_, err := n.manager.MountAs(ctx, "", "vol", "web-1", csi.Usage{ReadOnly: true, AccessMode: model.AccessModeMultiNodeReader})
	require.NoError(t, err)
	require.Equal(t, string(model.AccessModeMultiNodeReader), n.status("vol").Record.GetAccessMode())

	// The refusals below send no volume RPC: the mocks expect none.
	before := n.status("vol").Record
	_, err = n.manager.MountAs(ctx, "", "vol", "web-2", csi.Usage{AccessMode: model.AccessModeSingleNodeWriter})
	require.ErrorIs(t, err, volumes.ErrInUse)
	require.ErrorContains(t, err, "is used on this node as file-system multi-node-reader-only; a mount as file-system single-node-writer waits until its allocs [web-1] unmount")
	_, err = n.manager.Mount(ctx, "", "vol", "web-3", true)
	require.ErrorIs(t, err, volumes.ErrClaimRefused)
	require.ErrorContains(t, err, "has 2 capabilities that fit the claim by alloc web-3")
	err = n.manager.ClaimAs(ctx, "", "vol", "web-4", csi.Usage{AccessMode: model.AccessModeMultiNodeMultiWriter})
	require.ErrorIs(t, err, volumes.ErrClaimRefused)
	require.ErrorContains(t, err, "has no capability access=multi-node-multi-writer")
	require.Equal(t, before.GetPublishes()["web-1"].GetState(), n.status("vol").Record.GetPublishes()["web-1"].GetState())
	require.Len(t, n.status("vol").Record.GetPublishes(), 1, "the refused mounts left no publish")
	_, readers, _ := n.catalog.claims("vol")
	require.Equal(t, []string{"web-1"}, readers)
}
