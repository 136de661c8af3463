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
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/csi/hostpath/internal/mount"
)

// TestBindMount publishes a volume read-write and read-only with real bind
// mounts, checks what a workload sees through them and that the mount table
// has them, then unpublishes and checks that they are gone.
func TestBindMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("bind mounts need root and this test runs as uid %d; "+
			"the symlink fallback taken instead is covered by TestSanity and hostpathtest's TestSymlinkFallback", os.Geteuid())
	}
	cfg := config(t)
	cfg.SymlinkFallback = false // a bind mount or nothing
	p, id, staging := stagedVolume(t, cfg)
	requireMounted(t, staging, true)
	rw, ro := p.path("rw"), p.path("ro")
	_, err := p.node.NodePublishVolume(t.Context(), publishReq(id, staging, rw, false))
	require.NoError(t, err)
	_, err = p.node.NodePublishVolume(t.Context(), publishReq(id, staging, ro, true))
	require.NoError(t, err)
	requireMounted(t, rw, true)
	requireMounted(t, ro, true)

	require.NoError(t, os.WriteFile(filepath.Join(rw, "hello.txt"), []byte("hello"), 0o644))
	volume, err := p.srv.Driver.VolumePath(id)
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(volume, "hello.txt"))
	require.NoError(t, err)
	require.Equal(t, "hello", string(data), "the file written through the target is in the volume")
	data, err = os.ReadFile(filepath.Join(ro, "hello.txt"))
	require.NoError(t, err)
	require.Equal(t, "hello", string(data))
	err = os.WriteFile(filepath.Join(ro, "nope.txt"), nil, 0o644)
	require.ErrorIs(t, err, syscall.EROFS, "the read-only target refuses writes")

	stats, err := p.node.NodeGetVolumeStats(t.Context(), &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: rw})
	require.NoError(t, err)
	require.EqualValues(t, len("hello"), stats.GetUsage()[0].GetUsed())

	p.unpublish(t, id, rw)
	p.unpublish(t, id, ro)
	requireMounted(t, rw, false)
	requireMounted(t, ro, false)
	require.NoDirExists(t, rw)
	require.NoDirExists(t, ro)
	require.FileExists(t, filepath.Join(volume, "hello.txt"), "unpublishing keeps the data")
	p.unstage(t, id, staging)
	requireMounted(t, staging, false)
	require.DirExists(t, staging, "the staging directory belongs to the CO")
}

// TestStagingAgainMountsWhatWasLost unmounts a staging path behind the
// driver's back, as a reboot does: the node's health says so, and staging
// again at the same path mounts it again.
func TestStagingAgainMountsWhatWasLost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("bind mounts need root and this test runs as uid %d", os.Geteuid())
	}
	cfg := config(t)
	cfg.SymlinkFallback = false
	p, id, staging := stagedVolume(t, cfg)
	require.NoError(t, mount.Unmount(staging))

	health, err := p.node.NodeGetVolumeHealth(t.Context(), &csi.NodeGetVolumeHealthRequest{VolumeId: id})
	require.NoError(t, err)
	require.Len(t, health.GetVolumeHealth().GetHealthStatuses(), 1)
	require.Equal(t, hostpath.HealthStagingNotMounted, health.GetVolumeHealth().GetHealthStatuses()[0].GetReason())

	p.stage(t, id, staging)
	requireMounted(t, staging, true)
	health, err = p.node.NodeGetVolumeHealth(t.Context(), &csi.NodeGetVolumeHealthRequest{VolumeId: id})
	require.NoError(t, err)
	require.Empty(t, health.GetVolumeHealth().GetHealthStatuses())
	p.unstage(t, id, staging)
	requireMounted(t, staging, false)
}

// requireMounted checks /proc/self/mountinfo for target.
func requireMounted(t *testing.T, target string, want bool) {
	t.Helper()
	points, err := mount.Points()
	require.NoError(t, err)
	if want {
		require.Contains(t, points, target)
	} else {
		require.NotContains(t, points, target)
	}
}

// TestABusyTargetIsAFailedPreconditionNamingIt holds a file open in a
// published target, so the kernel refuses its umount (EBUSY): unpublish
// answers FailedPrecondition (the agent's 409) naming the target, leaves
// it mounted, and succeeds once the file is closed.
func TestABusyTargetIsAFailedPreconditionNamingIt(t *testing.T) {
	p, _, id, staging, target := boundVolume(t)
	held, err := os.Create(filepath.Join(target, "held"))
	require.NoError(t, err)

	_, err = p.node.NodeUnpublishVolume(t.Context(), &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target})
	requireCode(t, codes.FailedPrecondition, err)
	require.Contains(t, err.Error(), target+" is busy: a process holds files or its working directory there; stop it, then unpublish again")
	requireMounted(t, target, true)

	require.NoError(t, held.Close())
	p.unpublish(t, id, target)
	requireMounted(t, target, false)
	p.unstage(t, id, staging)
}

// TestTheWayOutOfAVolumeThatNoLongerExistsIsNotFoundAndLeavesItsMounts:
// a volume deleted under its mounts (its record gone, as upstream's driver
// deletes a volume in use) answers NodeUnpublishVolume and
// NodeUnstageVolume with NotFound, as upstream's does, and leaves the
// target and the staging path mounted: the CO must clean them up.
func TestTheWayOutOfAVolumeThatNoLongerExistsIsNotFoundAndLeavesItsMounts(t *testing.T) {
	p, cfg, id, staging, target := boundVolume(t)
	hostpathtest.ForgetVolume(t, cfg.Root, id)
	_, err := p.node.NodeUnpublishVolume(t.Context(), &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target})
	requireCode(t, codes.NotFound, err)
	require.ErrorContains(t, err, "hostpath: volume "+id+" does not exist")
	requireMounted(t, target, true)
	_, err = p.node.NodeUnstageVolume(t.Context(), &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
	requireCode(t, codes.NotFound, err)
	requireMounted(t, staging, true)
}

// boundVolume serves a driver that bind-mounts (it skips the test unless
// it runs as root), and stages a volume and publishes it at the path
// "target".
func boundVolume(t *testing.T) (p *plugin, cfg hostpath.Config, id, staging, target string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("bind mounts need root and this test runs as uid %d", os.Geteuid())
	}
	cfg = config(t)
	cfg.SymlinkFallback = false
	p, id, staging = stagedVolume(t, cfg)
	target = p.path("target")
	_, err := p.node.NodePublishVolume(t.Context(), publishReq(id, staging, target, false))
	require.NoError(t, err)
	return p, cfg, id, staging, target
}
