package hostpath_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// groupCap is the writer capability with volume_mount_group group.
func groupCap(group string) *csi.VolumeCapability {
	c := proto.Clone(writer).(*csi.VolumeCapability)
	c.GetMount().VolumeMountGroup = group
	return c
}

// TestAMountGroupOwnsTheVolumeRootAndStaysOneUntilUnstaged stages a volume
// with a mount group: the volume root gets the group, setgid and group
// access, what is made inside keeps the group, and a publish or a staging
// again with another group is refused, as kubelet's fsGroup delegation
// implies. Bad groups and block volumes are refused.
func TestAMountGroupOwnsTheVolumeRootAndStaysOneUntilUnstaged(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("giving a directory another group needs root; this test runs as uid %d", os.Geteuid())
	}
	p := serve(t, config(t))
	caps, err := p.node.NodeGetCapabilities(t.Context(), &csi.NodeGetCapabilitiesRequest{})
	require.NoError(t, err)
	var advertised bool
	for _, c := range caps.GetCapabilities() {
		advertised = advertised || c.GetRpc().GetType() == csi.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP
	}
	require.True(t, advertised, "VOLUME_MOUNT_GROUP is advertised")

	id := p.create(t, "v")
	staging, target := p.path("staging"), p.path("target")
	for _, bad := range []string{"-1", "staff", "4294967295", "007"} {
		_, err := p.node.NodeStageVolume(t.Context(), &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: groupCap(bad)})
		requireCode(t, codes.InvalidArgument, err)
		require.ErrorContains(t, err, "volume_mount_group")
	}
	block := blockCap()
	_, err = p.node.NodeStageVolume(t.Context(), &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: block})
	requireCode(t, codes.InvalidArgument, err)

	_, err = p.node.NodeStageVolume(t.Context(), &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: groupCap("4242")})
	require.NoError(t, err)
	volume, err := p.srv.Driver.VolumePath(id)
	require.NoError(t, err)
	fi, err := os.Stat(volume)
	require.NoError(t, err)
	require.EqualValues(t, 4242, fi.Sys().(*syscall.Stat_t).Gid, "the volume root belongs to the mount group")
	require.NotZero(t, fi.Mode()&os.ModeSetgid, "the volume root is setgid")
	require.EqualValues(t, 0o070, fi.Mode().Perm()&0o070, "the group reads, writes and searches the volume root")

	_, err = p.node.NodeStageVolume(t.Context(), &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: groupCap("7")})
	requireCode(t, codes.FailedPrecondition, err)
	require.ErrorContains(t, err, `staged with mount group "4242"`)
	pub := publishReq(id, staging, target, false)
	pub.VolumeCapability = groupCap("7")
	_, err = p.node.NodePublishVolume(t.Context(), pub)
	requireCode(t, codes.FailedPrecondition, err)
	require.ErrorContains(t, err, `mount group "7" waits until it is unstaged`)
	require.NoDirExists(t, target, "the refused publish made nothing")

	pub.VolumeCapability = groupCap("4242")
	_, err = p.node.NodePublishVolume(t.Context(), pub)
	require.NoError(t, err)
	require.NoError(t, os.Mkdir(filepath.Join(volume, "made"), 0o700))
	made, err := os.Stat(filepath.Join(volume, "made"))
	require.NoError(t, err)
	require.EqualValues(t, 4242, made.Sys().(*syscall.Stat_t).Gid, "what is made inside keeps the group")
	p.unpublish(t, id, target)
	p.unstage(t, id, staging)

	// Unstaged, the volume stages with another group.
	_, err = p.node.NodeStageVolume(t.Context(), &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: groupCap("7")})
	require.NoError(t, err)
	fi, err = os.Stat(volume)
	require.NoError(t, err)
	require.EqualValues(t, 7, fi.Sys().(*syscall.Stat_t).Gid)
	p.unstage(t, id, staging)
}
