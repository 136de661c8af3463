package main

import (
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/internal/mountinfo"
)

// TestAVolumeMountedBeforeAKill9IsUnmountedAfterTheRestart mounts a volume
// through the CLI, kills the agent with SIGKILL, starts it again on the
// same data dir, and unmounts through the CLI: the durable record lets the
// new agent unpublish, unstage and release, and nothing is left mounted.
func TestAVolumeMountedBeforeAKill9IsUnmountedAfterTheRestart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for bind mounts")
	}
	dir := dataDir(t)
	agent := startAgent(t, dir, "-fingerprint-interval", "200ms")
	socket := filepath.Join(dir, "plugins", "hp.sock")
	plugin := exec.Command(binary, "hostpath-csi", "-endpoint", socket, "-name", "hp", "-node-id", "n1", "-root", filepath.Join(dir, "hp"))
	require.NoError(t, plugin.Start())
	t.Cleanup(func() { _ = plugin.Process.Signal(syscall.SIGTERM); _ = plugin.Wait() })

	ctx := context.Background()
	dialCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	client, err := csi.Dial(dialCtx, socket, csi.Options{})
	require.NoError(t, err)
	created, err := client.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "data", VolumeCapabilities: []*csipb.VolumeCapability{{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}}})
	require.NoError(t, err)
	require.NoError(t, client.Close())
	id := created.GetVolume().GetVolumeId()
	require.Eventually(t, func() bool {
		out, _, _ := cli(t, "volume", "register", "-data-dir", dir, "-id", id, "-plugin", "hp", "-access-mode", "single-node-writer")
		return strings.Contains(out, "schedulable: true")
	}, time.Minute, 100*time.Millisecond, "the volume never became schedulable: the plugin was not fingerprinted healthy")

	out, stderr, code := cli(t, "volume", "mount", "-data-dir", dir, id, "web-1")
	require.Zero(t, code, stderr)
	target := filepath.Join(dir, "csi", "hp", volumes.PerAllocDirName, "web-1", "default", id)
	require.Contains(t, out, target)
	require.Contains(t, mountPoints(t, dir), target)

	agent.kill9()
	startAgent(t, dir, "-fingerprint-interval", "200ms")
	_, stderr, code = cli(t, "volume", "unmount", "-data-dir", dir, id, "web-1")
	require.Zero(t, code, "unmount after a kill -9: %s", stderr)
	require.NotContains(t, mountPoints(t, dir), target)
	status, _, code := cli(t, "volume", "status", "-data-dir", dir, "-json", id)
	require.Zero(t, code)
	require.Contains(t, status, `"write_claims": []`, "the claim the mount made is released")
	require.Contains(t, status, `"node": null`, "nothing is left on the node")
}

// mountPoints lists the kernel's mounts under dir.
func mountPoints(t *testing.T, dir string) []string {
	mounts, err := mountinfo.PointsUnder(mountinfo.DefaultPath, dir)
	require.NoError(t, err)
	return slices.Collect(maps.Keys(mounts))
}
