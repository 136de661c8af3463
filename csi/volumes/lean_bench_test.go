package volumes_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/plugvisor/plugvisor/csi/csitest"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/storage"
)

// leanPlugin is a CSI node plugin that does the kernel's part of a pair
// and nothing else: NodeStageVolume bind-mounts the volume's directory on
// the staging path, NodePublishVolume makes the target and bind-mounts the
// staging path on it, and the two others undo them. It keeps no state and
// checks nothing. With it, BenchmarkMountUnmount100Volumes measures the
// manager and gRPC over the kernel, without a real plugin's work.
type leanPlugin struct {
	csipb.UnimplementedIdentityServer
	csipb.UnimplementedNodeServer
	volumes string // the volumes' directories, one per volume ID
}

// serveLean starts a leanPlugin with count volumes under dir and returns
// its socket and its volume IDs. It stops when b ends, and what it left
// mounted under dir is unmounted.
func serveLean(b *testing.B, dir string, count int) (string, []string) {
	p := &leanPlugin{volumes: filepath.Join(dir, "volumes")}
	ids := make([]string, count)
	for i := range ids {
		ids[i] = fmt.Sprintf("lean-%d", i)
		require.NoError(b, os.MkdirAll(filepath.Join(p.volumes, ids[i]), 0o750))
	}
	// Registered before the server's stop, so run after it.
	b.Cleanup(func() { require.NoError(b, hostpathtest.UnmountAll(b, dir)) })
	socket := filepath.Join(dir, "csi.sock")
	csitest.Serve(b, socket, csitest.Services{Identity: p, Node: p})
	return socket, ids
}

func (p *leanPlugin) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{Name: "lean.csi.plugvisor.io", VendorVersion: "1.0.0"}, nil
}

func (p *leanPlugin) GetPluginCapabilities(context.Context, *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	return &csipb.GetPluginCapabilitiesResponse{}, nil
}

func (p *leanPlugin) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	return &csipb.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}

func (p *leanPlugin) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	return &csipb.NodeGetInfoResponse{NodeId: "n1"}, nil
}

func (p *leanPlugin) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	return &csipb.NodeGetCapabilitiesResponse{Capabilities: []*csipb.NodeServiceCapability{{
		Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{Type: csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME}},
	}}}, nil
}

func (p *leanPlugin) NodeStageVolume(_ context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	vol := filepath.Join(p.volumes, filepath.Base(req.GetVolumeId()))
	return &csipb.NodeStageVolumeResponse{}, syscall.Mount(vol, req.GetStagingTargetPath(), "", syscall.MS_BIND, "")
}

func (p *leanPlugin) NodeUnstageVolume(_ context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	return &csipb.NodeUnstageVolumeResponse{}, syscall.Unmount(req.GetStagingTargetPath(), 0)
}

func (p *leanPlugin) NodePublishVolume(_ context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	if err := syscall.Mkdir(req.GetTargetPath(), 0o750); err != nil {
		return nil, err
	}
	return &csipb.NodePublishVolumeResponse{}, syscall.Mount(req.GetStagingTargetPath(), req.GetTargetPath(), "", syscall.MS_BIND, "")
}

func (p *leanPlugin) NodeUnpublishVolume(_ context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	if err := syscall.Unmount(req.GetTargetPath(), 0); err != nil {
		return nil, err
	}
	return &csipb.NodeUnpublishVolumeResponse{}, syscall.Rmdir(req.GetTargetPath())
}

// leanNodePlugin starts a node with a leanPlugin "hp" of count volumes.
func leanNodePlugin(b *testing.B, wrap func(storage.Bucket) storage.Bucket, count int) benchPlugin {
	n := newNode(b, nil)
	n.wrapBucket = wrap
	n.restart()
	socket, ids := serveLean(b, hostpathtest.TempDir(b), count)
	n.register(volumes.NodePluginType, "hp", "a1", socket)
	return benchPlugin{node: n, endpoint: socket, external: ids,
		syncs: func() int64 { return 0 }, syncing: func() time.Duration { return 0 }}
}
