package volumes_test

import (
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"go.uber.org/mock/gomock"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/volumes"
)

// capabilityExactly matches a request whose volume capability is want.
func capabilityExactly(want *csipb.VolumeCapability) gomock.Matcher {
	return gomock.Cond(func(x any) bool {
		r, ok := x.(interface {
			GetVolumeCapability() *csipb.VolumeCapability
		})
		return ok && proto.Equal(r.GetVolumeCapability(), want)
	})
}

func TestAMountGroupIsPassedToStageAndPublishWhenTheNodeAdvertisesIt(t *testing.T) {
	n := newNode(t, nil)
	n.catalog.add("vol", "vol", "mock", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem)
	m := newMockPlugin(t, n, true, false)
	m.nodeCapsWith(csipb.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP).AnyTimes()
	m.controllerCaps().AnyTimes()
	want := &csipb.VolumeCapability{
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{VolumeMountGroup: "4242"}},
	}
	gomock.InOrder(
		m.Node.EXPECT().NodeStageVolume(gomock.Any(), capabilityExactly(want)).Return(&csipb.NodeStageVolumeResponse{}, nil),
		m.Node.EXPECT().NodePublishVolume(gomock.Any(), capabilityExactly(want)).Return(&csipb.NodePublishVolumeResponse{}, nil),
	)
	_, err := n.manager.MountWithGroup(ctx, "", "vol", "web-1", csi.Usage{}, "4242")
	require.NoError(t, err)
	rec := n.status("vol").Record
	require.Equal(t, "4242", rec.GetStage().GetMountGroup(), "the stage keeps its group for reconcile")
	require.Equal(t, "4242", rec.GetPublishes()["web-1"].GetMountGroup(), "the publish keeps its group for reconcile")

	// The same mount again is the same mount; another group for the same
	// alloc is refused before any RPC (the mocks expect none).
	_, err = n.manager.MountWithGroup(ctx, "", "vol", "web-1", csi.Usage{}, "4242")
	require.NoError(t, err)
	_, err = n.manager.MountWithGroup(ctx, "", "vol", "web-1", csi.Usage{}, "7")
	require.ErrorIs(t, err, volumes.ErrInUse)
	require.ErrorContains(t, err, `mount group "4242"`)
}

func TestAMountGroupIsRefusedWithoutVolumeMountGroupAndSendsNoVolumeRPC(t *testing.T) {
	n := newNode(t, nil)
	n.catalog.add("vol", "vol", "mock", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem)
	m := newMockPlugin(t, n, true, false)
	// Only the capability queries may come: no stage, publish, nor claim.
	m.nodeCaps().AnyTimes()
	m.controllerCaps().AnyTimes()
	_, err := n.manager.MountWithGroup(ctx, "", "vol", "web-1", csi.Usage{}, "1000")
	require.ErrorIs(t, err, volumes.ErrUnsupported)
	require.ErrorContains(t, err, "does not advertise VOLUME_MOUNT_GROUP")
	require.Empty(t, n.status("vol").Record.GetPublishes(), "the refused mount left no publish")
	writers, readers, _ := n.catalog.claims("vol")
	require.Empty(t, writers)
	require.Empty(t, readers)
}

func TestABadMountGroupIsRefusedNamingTheFieldBeforeAnyRequest(t *testing.T) {
	n := newNode(t, nil)
	n.catalog.add("vol", "vol", "mock", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem)
	m := newMockPlugin(t, n, true, false)
	m.nodeCapsWith(csipb.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP).AnyTimes()
	m.controllerCaps().AnyTimes()
	for _, bad := range []string{"-1", "abc", "4294967295", "99999999999999999999", "+5", "007", " 5", "1.5"} {
		_, err := n.manager.MountWithGroup(ctx, "", "vol", "web-1", csi.Usage{}, bad)
		require.ErrorIs(t, err, volumes.ErrInvalid, bad)
		require.ErrorContains(t, err, "mount_group", bad)
		require.Error(t, volumes.CheckMountGroup(bad), bad)
	}
	for _, good := range []string{"", "0", "1000", "4294967294"} {
		require.NoError(t, volumes.CheckMountGroup(good), good)
	}
	require.Empty(t, n.status("vol").Record.GetPublishes())
	n.requireNoWriter("vol")
}

// TestReconcileSendsTheMountGroupAgain unmounts a target mounted with a
// mount group and its staging path behind the agent's back while it is
// down: the reconcile at start stages and publishes again with the same
// group, which the strict hostpath plugin (it refuses another group while
// staged with one) accepts.
func TestReconcileSendsTheMountGroupAgain(t *testing.T) {
	n := newNode(t, nil)
	p := newStrictPlugin(t, n, "hp")
	p.create(n, "vol", "hp", model.AccessModeSingleNodeWriter)
	res, err := n.manager.MountWithGroup(ctx, "", "vol", "web-1", csi.Usage{}, "4242")
	require.NoError(t, err)
	n.stop()
	require.NoError(t, unix.Unmount(res.TargetPath, unix.MNT_DETACH))
	require.NoError(t, unix.Unmount(res.StagingPath, unix.MNT_DETACH))

	n.start()
	st := n.settle("vol")
	require.Equal(t, "reconcile", st.LastOperation)
	require.Empty(t, st.LastError)
	require.Contains(t, mountsUnder(t, n.root), res.TargetPath, "the target is mounted again")
	require.Equal(t, "4242", st.Record.GetPublishes()["web-1"].GetMountGroup())
	require.NoError(t, n.manager.Unmount(ctx, "", "vol", "web-1"))
	require.Empty(t, mountsUnder(t, n.root))
}
