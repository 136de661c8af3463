package hostpathtest_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
)

func TestMain(m *testing.M) {
	hostpathtest.Main(m)
}

var writer = &csi.VolumeCapability{
	AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
	AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
}

// clients talks to a plugin process.
type clients struct {
	id   csi.IdentityClient
	ctrl csi.ControllerClient
	node csi.NodeClient
}

func connect(t *testing.T, endpoint string) clients {
	conn := hostpathtest.Dial(t, endpoint)
	return clients{csi.NewIdentityClient(conn), csi.NewControllerClient(conn), csi.NewNodeClient(conn)}
}

func (c clients) createAndStage(t *testing.T, name, staging string) string {
	t.Helper()
	vol, err := c.ctrl.CreateVolume(t.Context(), &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{writer}})
	require.NoError(t, err)
	id := vol.GetVolume().GetVolumeId()
	_, err = c.node.NodeStageVolume(t.Context(), &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: writer})
	require.NoError(t, err)
	return id
}

func (c clients) publish(ctx context.Context, id, staging, target string) error {
	_, err := c.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: writer})
	return err
}

// TestKilledProcessRestartsWithItsState kills the plugin with SIGKILL while
// it has a volume staged and published, sees its socket stop answering,
// starts it again and finds the volume, the staging and the publication.
func TestKilledProcessRestartsWithItsState(t *testing.T) {
	dir := hostpathtest.TempDir(t)
	cfg := hostpathtest.ProcessConfig{
		Endpoint: filepath.Join(dir, "csi.sock"),
		Driver:   hostpath.Config{Root: filepath.Join(dir, "root"), NodeID: "node-1", SymlinkFallback: true},
	}
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")

	first := hostpathtest.StartProcess(t, cfg)
	c := connect(t, cfg.Endpoint)
	_, err := c.id.Probe(t.Context(), &csi.ProbeRequest{})
	require.NoError(t, err)
	id := c.createAndStage(t, "survivor", staging)
	require.NoError(t, c.publish(t.Context(), id, staging, target))
	require.NoError(t, os.WriteFile(filepath.Join(target, "data"), []byte("kept"), 0o644))

	first.Kill()
	require.ErrorContains(t, first.Wait(), "signal: killed")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = c.id.Probe(ctx, &csi.ProbeRequest{})
	require.Equal(t, codes.Unavailable, status.Code(err), "a killed plugin does not answer: %v", err)
	require.FileExists(t, cfg.Endpoint, "kill -9 leaves the socket file behind")

	second := hostpathtest.StartProcess(t, cfg)
	require.Contains(t, second.Output(), "removed stale socket")
	_, err = c.id.Probe(t.Context(), &csi.ProbeRequest{}, grpc.WaitForReady(true))
	require.NoError(t, err, "the old connection reconnects to the new process")
	list, err := c.ctrl.ListVolumes(t.Context(), &csi.ListVolumesRequest{})
	require.NoError(t, err)
	require.Len(t, list.GetEntries(), 1)
	require.Equal(t, id, list.GetEntries()[0].GetVolume().GetVolumeId())
	again, err := c.ctrl.CreateVolume(t.Context(), &csi.CreateVolumeRequest{Name: "survivor", VolumeCapabilities: []*csi.VolumeCapability{writer}})
	require.NoError(t, err)
	require.Equal(t, id, again.GetVolume().GetVolumeId())
	data, err := os.ReadFile(filepath.Join(target, "data"))
	require.NoError(t, err)
	require.Equal(t, "kept", string(data), "the publication outlives the plugin")
	require.NoError(t, c.publish(t.Context(), id, staging, target), "publishing again is idempotent after a restart")

	_, err = c.node.NodeUnpublishVolume(t.Context(), &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target})
	require.NoError(t, err)
	require.NoDirExists(t, target)
	_, err = c.node.NodeUnstageVolume(t.Context(), &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
	require.NoError(t, err)
	_, err = c.ctrl.DeleteVolume(t.Context(), &csi.DeleteVolumeRequest{VolumeId: id})
	require.NoError(t, err)

	require.NoError(t, second.Stop(), "SIGTERM makes a clean exit")
	require.NoFileExists(t, cfg.Endpoint, "a clean exit removes the socket")
	require.Contains(t, second.Output(), "exited cleanly")
}

// TestSymlinkFallback runs the plugin as an unprivileged user (uid 65534
// when the test is root), where bind mounts are not permitted: without
// -symlink-fallback staging fails and says why, with it the staging is
// recorded without a mount and the target is a symlink to the volume.
func TestSymlinkFallback(t *testing.T) {
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred = &syscall.Credential{Uid: 65534, Gid: 65534}
	}
	tests := []struct {
		name     string
		fallback bool
	}{
		{"without the fallback staging fails", false},
		{"with the fallback the target is a symlink", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := hostpathtest.TempDir(t)
			if cred != nil {
				require.NoError(t, os.Chown(dir, int(cred.Uid), int(cred.Gid)))
			}
			root := filepath.Join(dir, "root")
			p := hostpathtest.StartProcess(t, hostpathtest.ProcessConfig{
				Endpoint:   filepath.Join(dir, "csi.sock"),
				Driver:     hostpath.Config{Root: root, NodeID: "node-1", SymlinkFallback: tt.fallback},
				Credential: cred,
			})
			c := connect(t, p.Endpoint)
			staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
			if !tt.fallback {
				vol, err := c.ctrl.CreateVolume(t.Context(), &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{writer}})
				require.NoError(t, err)
				_, err = c.node.NodeStageVolume(t.Context(), &csi.NodeStageVolumeRequest{VolumeId: vol.GetVolume().GetVolumeId(), StagingTargetPath: staging, VolumeCapability: writer})
				require.Equal(t, codes.FailedPrecondition, status.Code(err), "error: %v", err)
				require.Contains(t, status.Convert(err).Message(), "hostpath: bind mount needs root: ")
				require.NoDirExists(t, staging, "a failed staging leaves no staging directory it made")
				_, err = c.node.NodeUnstageVolume(t.Context(), &csi.NodeUnstageVolumeRequest{VolumeId: vol.GetVolume().GetVolumeId(), StagingTargetPath: staging})
				require.NoError(t, err, "nothing is staged, so nothing is left to unstage")
				return
			}
			id := c.createAndStage(t, "v", staging)
			require.Contains(t, p.Output(), "staged without a mount")
			require.NoError(t, c.publish(t.Context(), id, staging, target))
			link, err := os.Readlink(target)
			require.NoError(t, err)
			require.Equal(t, filepath.Join(root, "volumes", id), link)
			require.Contains(t, p.Output(), "published with a symlink instead")

			_, err = c.node.NodeUnpublishVolume(t.Context(), &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target})
			require.NoError(t, err)
			_, err = os.Lstat(target)
			require.ErrorIs(t, err, os.ErrNotExist)
		})
	}
}

// TestKilledAttachRequiredProcessKeepsItsAttachment kills a plugin run with
// -attach-required while a volume is attached, staged and published: the
// restarted plugin still refuses to detach or unstage it, takes the old
// publish context, and lets the volume go in order.
func TestKilledAttachRequiredProcessKeepsItsAttachment(t *testing.T) {
	dir := hostpathtest.TempDir(t)
	cfg := hostpathtest.ProcessConfig{
		Endpoint: filepath.Join(dir, "csi.sock"),
		Driver:   hostpath.Config{Root: filepath.Join(dir, "root"), NodeID: "node-1", SymlinkFallback: true, AttachRequired: true},
	}
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
	first := hostpathtest.StartProcess(t, cfg)
	c := connect(t, cfg.Endpoint)
	vol, err := c.ctrl.CreateVolume(t.Context(), &csi.CreateVolumeRequest{Name: "attached", VolumeCapabilities: []*csi.VolumeCapability{writer}})
	require.NoError(t, err)
	id := vol.GetVolume().GetVolumeId()
	attached, err := c.ctrl.ControllerPublishVolume(t.Context(), &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "node-1", VolumeCapability: writer})
	require.NoError(t, err)
	pc := attached.GetPublishContext()
	stage := &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: writer, PublishContext: pc}
	_, err = c.node.NodeStageVolume(t.Context(), stage)
	require.NoError(t, err)
	publish := &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: writer, PublishContext: pc}
	_, err = c.node.NodePublishVolume(t.Context(), publish)
	require.NoError(t, err)

	first.Kill()
	require.ErrorContains(t, first.Wait(), "signal: killed")
	second := hostpathtest.StartProcess(t, cfg)
	_, err = c.id.Probe(t.Context(), &csi.ProbeRequest{}, grpc.WaitForReady(true))
	require.NoError(t, err)

	detach := &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "node-1"}
	_, err = c.ctrl.ControllerUnpublishVolume(t.Context(), detach)
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "detaching a published volume: %v", err)
	unstage := &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}
	_, err = c.node.NodeUnstageVolume(t.Context(), unstage)
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "unstaging a published volume: %v", err)
	_, err = c.node.NodeStageVolume(t.Context(), stage)
	require.NoError(t, err, "the publish context from before the restart is still the attachment's")
	_, err = c.node.NodePublishVolume(t.Context(), publish)
	require.NoError(t, err)

	_, err = c.node.NodeUnpublishVolume(t.Context(), &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target})
	require.NoError(t, err)
	_, err = c.node.NodeUnstageVolume(t.Context(), unstage)
	require.NoError(t, err)
	_, err = c.ctrl.ControllerUnpublishVolume(t.Context(), detach)
	require.NoError(t, err)
	_, err = c.ctrl.DeleteVolume(t.Context(), &csi.DeleteVolumeRequest{VolumeId: id})
	require.NoError(t, err)
	require.NoError(t, second.Stop())
}
