package hostpath_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
)

// plugin is a driver served in-process with clients for its services.
type plugin struct {
	dir  string // a TempDir holding the root; targets and stagings go here too
	srv  *hostpathtest.Server
	id   csi.IdentityClient
	ctrl csi.ControllerClient
	node csi.NodeClient
}

// config returns a driver config rooted in a fresh TempDir. The symlink
// fallback is on so that publishing works as any user.
func config(t *testing.T) hostpath.Config {
	return hostpath.Config{
		Root:            filepath.Join(hostpathtest.TempDir(t), "root"),
		NodeID:          "node-1",
		SymlinkFallback: true,
	}
}

// serve serves a driver with cfg and connects clients to it.
func serve(t *testing.T, cfg hostpath.Config) *plugin {
	t.Helper()
	srv := hostpathtest.Serve(t, cfg)
	conn := hostpathtest.Dial(t, srv.Endpoint)
	return &plugin{
		dir:  filepath.Dir(srv.Driver.Config().Root),
		srv:  srv,
		id:   csi.NewIdentityClient(conn),
		ctrl: csi.NewControllerClient(conn),
		node: csi.NewNodeClient(conn),
	}
}

// stagedVolume serves a driver with cfg, creates a volume and stages it at
// the path "staging".
func stagedVolume(t *testing.T, cfg hostpath.Config) (p *plugin, id, staging string) {
	t.Helper()
	p = serve(t, cfg)
	id = p.create(t, "v")
	staging = p.path("staging")
	p.stage(t, id, staging)
	return p, id, staging
}

// path returns a path in the plugin's TempDir, outside its root.
func (p *plugin) path(name string) string { return filepath.Join(p.dir, name) }

func mountCap(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

func blockCap() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

var writer = mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)

func createReq(name string, requiredBytes int64) *csi.CreateVolumeRequest {
	return &csi.CreateVolumeRequest{
		Name:               name,
		CapacityRange:      &csi.CapacityRange{RequiredBytes: requiredBytes},
		VolumeCapabilities: []*csi.VolumeCapability{writer},
	}
}

// create creates a volume and returns its ID.
func (p *plugin) create(t *testing.T, name string) string {
	t.Helper()
	resp, err := p.ctrl.CreateVolume(t.Context(), createReq(name, 1<<20))
	require.NoError(t, err)
	return resp.GetVolume().GetVolumeId()
}

func (p *plugin) stage(t *testing.T, id, staging string) {
	t.Helper()
	_, err := p.node.NodeStageVolume(t.Context(), &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: writer})
	require.NoError(t, err)
}

func publishReq(id, staging, target string, readonly bool) *csi.NodePublishVolumeRequest {
	return &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: writer, Readonly: readonly}
}

func (p *plugin) unstage(t *testing.T, id, staging string) {
	t.Helper()
	_, err := p.node.NodeUnstageVolume(t.Context(), &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
	require.NoError(t, err)
}

func (p *plugin) delete(t *testing.T, id string) {
	t.Helper()
	_, err := p.ctrl.DeleteVolume(t.Context(), &csi.DeleteVolumeRequest{VolumeId: id})
	require.NoError(t, err)
}

func (p *plugin) unpublish(t *testing.T, id, target string) {
	t.Helper()
	_, err := p.node.NodeUnpublishVolume(t.Context(), &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target})
	require.NoError(t, err)
}

// requireCode checks that err is a gRPC status with the given code.
func requireCode(t *testing.T, want codes.Code, err error) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, want.String(), status.Code(err).String(), "error: %v", err)
	require.True(t, strings.HasPrefix(status.Convert(err).Message(), "hostpath: ") || want == codes.Unimplemented,
		"message %q lacks the package prefix", status.Convert(err).Message())
}

func TestNewRejectsBadConfig(t *testing.T) {
	root := t.TempDir()
	tests := []struct {
		name string
		edit func(*hostpath.Config)
		want string
	}{
		{"empty node id", func(c *hostpath.Config) { c.NodeID = "" }, "node id must not be empty"},
		{"node id with a slash", func(c *hostpath.Config) { c.NodeID = "a/b" }, "must not contain a path separator"},
		{"node id that climbs out of its directory", func(c *hostpath.Config) { c.NodeID = "../../etc" }, "must not contain a path separator"},
		{"node id that is two dots", func(c *hostpath.Config) { c.NodeID = ".." }, `must not contain ".."`},
		{"node id with a right-to-left override", func(c *hostpath.Config) { c.NodeID = "no\u202Ede" }, "bidirectional"},
		{"node id longer than 128 bytes", func(c *hostpath.Config) { c.NodeID = strings.Repeat("n", 129) }, "over the limit of 128"},
		{"relative root", func(c *hostpath.Config) { c.Root = "relative/root" }, "must be an absolute path"},
		{"unknown mode", func(c *hostpath.Config) { c.Mode = "both" }, `mode "both" must be`},
		{"plugin name with a space", func(c *hostpath.Config) { c.Name = "host path" }, "name \"host path\""},
		{"negative volume limit", func(c *hostpath.Config) { c.MaxVolumes = -1 }, "must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := hostpath.Config{Root: filepath.Join(root, "r"), NodeID: "node-1"}
			tt.edit(&cfg)
			_, err := hostpath.New(cfg)
			require.ErrorIs(t, err, hostpath.ErrInvalidConfig)
			require.ErrorContains(t, err, tt.want)
			require.True(t, strings.HasPrefix(err.Error(), "hostpath: "))
			require.Equal(t, 1, strings.Count(err.Error(), "hostpath: "), "the package is named once: %v", err)
			require.Equal(t, 1, strings.Count(err.Error(), "invalid"), "the refusal says invalid once: %v", err)
			if strings.HasPrefix(tt.name, "node id") || tt.name == "empty node id" {
				require.ErrorIs(t, err, hostpath.ErrInvalidID)
			}
		})
	}
	_, err := os.Stat(filepath.Join(root, "r"))
	require.ErrorIs(t, err, os.ErrNotExist, "a rejected config must not create the root")
}

func TestParseEndpoint(t *testing.T) {
	long := "/" + strings.Repeat("s", hostpath.MaxSocketPathLength)
	tests := []struct {
		name, endpoint, want, wantErr string
	}{
		{name: "absolute path", endpoint: "/run/csi.sock", want: "/run/csi.sock"},
		{name: "unix URL with three slashes", endpoint: "unix:///run/csi.sock", want: "/run/csi.sock"},
		{name: "unix URL with one slash", endpoint: "unix:/run/csi.sock", want: "/run/csi.sock"},
		{name: "path of exactly 107 bytes", endpoint: long[:hostpath.MaxSocketPathLength], want: long[:hostpath.MaxSocketPathLength]},
		{name: "empty", endpoint: "", wantErr: "must not be empty"},
		{name: "relative path", endpoint: "csi.sock", wantErr: "must be absolute"},
		{name: "relative unix URL", endpoint: "unix://csi.sock", wantErr: "must be absolute"},
		{name: "path of 108 bytes", endpoint: long, wantErr: "is 108 bytes, longer than the 107"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := hostpath.ParseEndpoint(tt.endpoint)
			if tt.wantErr != "" {
				require.ErrorIs(t, err, hostpath.ErrInvalidEndpoint)
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestListenHandlesWhatIsAtTheSocketPath(t *testing.T) {
	p := serve(t, config(t))
	d, err := hostpath.New(config(t))
	require.NoError(t, err)
	dir := hostpathtest.TempDir(t)

	t.Run("a socket another process serves is refused", func(t *testing.T) {
		_, err := d.Listen(p.srv.Endpoint)
		require.ErrorContains(t, err, "is in use by another process")
	})
	t.Run("a stale socket, as a killed plugin leaves, is replaced", func(t *testing.T) {
		stale := filepath.Join(dir, "stale.sock")
		l, err := net.Listen("unix", stale)
		require.NoError(t, err)
		l.(*net.UnixListener).SetUnlinkOnClose(false)
		require.NoError(t, l.Close())
		l, err = d.Listen(stale)
		require.NoError(t, err)
		require.NoError(t, l.Close())
	})
	t.Run("a file that is not a socket is refused", func(t *testing.T) {
		file := filepath.Join(dir, "file")
		require.NoError(t, os.WriteFile(file, nil, 0o600))
		_, err := d.Listen(file)
		require.ErrorContains(t, err, "exists and is not a socket")
		require.FileExists(t, file)
	})
}

func TestIdentity(t *testing.T) {
	cfg := config(t)
	cfg.Name, cfg.Version = "hostpath.example.com", "1.2.3"
	p := serve(t, cfg)

	info, err := p.id.GetPluginInfo(t.Context(), &csi.GetPluginInfoRequest{})
	require.NoError(t, err)
	require.Equal(t, "hostpath.example.com", info.GetName())
	require.Equal(t, "1.2.3", info.GetVendorVersion())

	caps, err := p.id.GetPluginCapabilities(t.Context(), &csi.GetPluginCapabilitiesRequest{})
	require.NoError(t, err)
	require.ElementsMatch(t, []csi.PluginCapability_Service_Type{csi.PluginCapability_Service_CONTROLLER_SERVICE}, serviceTypes(caps),
		"no VOLUME_ACCESSIBILITY_CONSTRAINTS without -topology")
	cfg.Topology = true
	zonal, err := serve(t, cfg).id.GetPluginCapabilities(t.Context(), &csi.GetPluginCapabilitiesRequest{})
	require.NoError(t, err)
	require.ElementsMatch(t, []csi.PluginCapability_Service_Type{
		csi.PluginCapability_Service_CONTROLLER_SERVICE,
		csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS,
	}, serviceTypes(zonal), "with -topology")

	require.Equal(t, csi.PluginCapability_VolumeExpansion_ONLINE, caps.GetCapabilities()[len(caps.GetCapabilities())-1].GetVolumeExpansion().GetType())

	probe, err := p.id.Probe(t.Context(), &csi.ProbeRequest{})
	require.NoError(t, err)
	require.True(t, probe.GetReady().GetValue())

	nodeInfo, err := p.node.NodeGetInfo(t.Context(), &csi.NodeGetInfoRequest{})
	require.NoError(t, err)
	require.Equal(t, "node-1", nodeInfo.GetNodeId())
	require.Equal(t, map[string]string{hostpath.TopologyKey: "node-1"}, nodeInfo.GetAccessibleTopology().GetSegments())
}

func serviceTypes(resp *csi.GetPluginCapabilitiesResponse) []csi.PluginCapability_Service_Type {
	var types []csi.PluginCapability_Service_Type
	for _, c := range resp.GetCapabilities() {
		if c.GetService() != nil {
			types = append(types, c.GetService().GetType())
		}
	}
	return types
}

func TestModesServeTheirServicesOnly(t *testing.T) {
	cfg := config(t)
	cfg.Mode = hostpath.ModeController
	controller := serve(t, cfg)
	cfg.Mode = hostpath.ModeNode
	node := serve(t, cfg) // shares the controller's root, as two processes on one host would

	caps, err := node.id.GetPluginCapabilities(t.Context(), &csi.GetPluginCapabilitiesRequest{})
	require.NoError(t, err)
	require.Empty(t, serviceTypes(caps), "a node serves no controller and, without -topology, advertises no constraints")
	_, err = node.ctrl.CreateVolume(t.Context(), createReq("v", 0))
	requireCode(t, codes.Unimplemented, err)
	_, err = controller.node.NodeGetInfo(t.Context(), &csi.NodeGetInfoRequest{})
	requireCode(t, codes.Unimplemented, err)

	id := controller.create(t, "v")
	node.stage(t, id, node.path("staging"))
	_, err = controller.ctrl.DeleteVolume(t.Context(), &csi.DeleteVolumeRequest{VolumeId: id})
	requireCode(t, codes.FailedPrecondition, err)
	node.unstage(t, id, node.path("staging"))
	controller.delete(t, id)
}

// TestBadInput sends malformed requests: each fails with the right code and
// a "hostpath: " message, and none of them changes anything on disk.
func TestBadInput(t *testing.T) {
	p, id, staging := stagedVolume(t, config(t))
	outside := p.path("outside")
	require.NoError(t, os.WriteFile(outside, []byte("keep"), 0o600))
	before := tree(t, p.dir)

	long := strings.Repeat("v", hostpath.MaxIDLength+1)
	multiNode := mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)
	noAccessType := &csi.VolumeCapability{AccessMode: writer.AccessMode}
	tests := []struct {
		name string
		call func(ctx context.Context) error
		want codes.Code
	}{
		{"create a volume without a name", func(ctx context.Context) error {
			return call(p.ctrl.CreateVolume(ctx, createReq("", 0)))
		}, codes.InvalidArgument},
		{"create a volume without capabilities", func(ctx context.Context) error {
			return call(p.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "new"}))
		}, codes.InvalidArgument},
		{"create a volume with the block access type", func(ctx context.Context) error {
			return call(p.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "new", VolumeCapabilities: []*csi.VolumeCapability{blockCap()}}))
		}, codes.InvalidArgument},
		{"create a volume with a multi-node access mode", func(ctx context.Context) error {
			return call(p.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "new", VolumeCapabilities: []*csi.VolumeCapability{multiNode}}))
		}, codes.InvalidArgument},
		{"create a volume with a capability without access type", func(ctx context.Context) error {
			return call(p.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "new", VolumeCapabilities: []*csi.VolumeCapability{noAccessType}}))
		}, codes.InvalidArgument},
		{"create a volume requiring more than its limit", func(ctx context.Context) error {
			req := createReq("new", 2<<20)
			req.CapacityRange.LimitBytes = 1 << 20
			return call(p.ctrl.CreateVolume(ctx, req))
		}, codes.OutOfRange},
		{"create a volume with a negative size", func(ctx context.Context) error {
			return call(p.ctrl.CreateVolume(ctx, createReq("new", -1)))
		}, codes.InvalidArgument},
		{"create a volume from a snapshot that does not exist", func(ctx context.Context) error {
			req := createReq("new", 0)
			req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: "s"}}}
			return call(p.ctrl.CreateVolume(ctx, req))
		}, codes.NotFound},
		{"create a volume as a clone of a volume that does not exist", func(ctx context.Context) error {
			req := createReq("new", 0)
			req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: "nope"}}}
			return call(p.ctrl.CreateVolume(ctx, req))
		}, codes.NotFound},
		{"create a clone smaller than its source", func(ctx context.Context) error {
			req := createReq("new", 0)
			req.CapacityRange.LimitBytes = 1
			req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}}
			return call(p.ctrl.CreateVolume(ctx, req))
		}, codes.OutOfRange},
		{"create a clone of a volume whose id climbs out of the root", func(ctx context.Context) error {
			req := createReq("new", 0)
			req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: "../x"}}}
			return call(p.ctrl.CreateVolume(ctx, req))
		}, codes.InvalidArgument},
		{"create a volume only on another node", func(ctx context.Context) error {
			req := createReq("new", 0)
			req.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: []*csi.Topology{{Segments: map[string]string{hostpath.TopologyKey: "node-2"}}}}
			return call(p.ctrl.CreateVolume(ctx, req))
		}, codes.ResourceExhausted},
		{"delete a volume with an empty id", func(ctx context.Context) error {
			return call(p.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{}))
		}, codes.InvalidArgument},
		{"delete a volume whose id climbs out of the root", func(ctx context.Context) error {
			return call(p.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "../../outside"}))
		}, codes.InvalidArgument},
		{"delete a volume whose id is two dots", func(ctx context.Context) error {
			return call(p.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: ".."}))
		}, codes.InvalidArgument},
		{"delete a volume whose id is longer than 128 bytes", func(ctx context.Context) error {
			return call(p.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: long}))
		}, codes.InvalidArgument},
		{"delete a volume that is still staged", func(ctx context.Context) error {
			return call(p.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}))
		}, codes.FailedPrecondition},
		{"validate a volume without capabilities", func(ctx context.Context) error {
			return call(p.ctrl.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id}))
		}, codes.InvalidArgument},
		{"validate a volume whose id has a slash", func(ctx context.Context) error {
			return call(p.ctrl.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "a/b", VolumeCapabilities: []*csi.VolumeCapability{writer}}))
		}, codes.InvalidArgument},
		{"validate an unknown volume", func(ctx context.Context) error {
			return call(p.ctrl.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "unknown", VolumeCapabilities: []*csi.VolumeCapability{writer}}))
		}, codes.NotFound},
		{"list volumes from a token the driver did not hand out", func(ctx context.Context) error {
			return call(p.ctrl.ListVolumes(ctx, &csi.ListVolumesRequest{StartingToken: "page-2"}))
		}, codes.Aborted},
		{"list volumes with a negative page size", func(ctx context.Context) error {
			return call(p.ctrl.ListVolumes(ctx, &csi.ListVolumesRequest{MaxEntries: -1}))
		}, codes.InvalidArgument},
		{"stage a volume whose id climbs out of the root", func(ctx context.Context) error {
			return call(p.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "../state", StagingTargetPath: p.path("s2"), VolumeCapability: writer}))
		}, codes.InvalidArgument},
		{"stage a volume without a capability", func(ctx context.Context) error {
			return call(p.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: p.path("s2")}))
		}, codes.InvalidArgument},
		{"stage a volume with the block access type", func(ctx context.Context) error {
			return call(p.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: p.path("s2"), VolumeCapability: blockCap()}))
		}, codes.InvalidArgument},
		{"stage a volume at a relative path", func(ctx context.Context) error {
			return call(p.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: "staging", VolumeCapability: writer}))
		}, codes.InvalidArgument},
		{"stage a volume inside the driver root", func(ctx context.Context) error {
			root := p.srv.Driver.Config().Root
			_, err := p.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: root + "/state/x", VolumeCapability: writer})
			return err
		}, codes.InvalidArgument},
		{"stage an unknown volume", func(ctx context.Context) error {
			return call(p.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "unknown", StagingTargetPath: p.path("s2"), VolumeCapability: writer}))
		}, codes.NotFound},
		{"stage a volume at a second staging path", func(ctx context.Context) error {
			return call(p.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: p.path("s2"), VolumeCapability: writer}))
		}, codes.FailedPrecondition},
		{"unstage a volume with an empty id", func(ctx context.Context) error {
			return call(p.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{StagingTargetPath: staging}))
		}, codes.InvalidArgument},
		{"unstage a volume at a relative path", func(ctx context.Context) error {
			return call(p.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: "staging"}))
		}, codes.InvalidArgument},
		{"publish a volume at a relative target path", func(ctx context.Context) error {
			return call(p.node.NodePublishVolume(ctx, publishReq(id, staging, "target", false)))
		}, codes.InvalidArgument},
		{"publish a volume without a target path", func(ctx context.Context) error {
			return call(p.node.NodePublishVolume(ctx, publishReq(id, staging, "", false)))
		}, codes.InvalidArgument},
		{"publish a volume whose id has a slash", func(ctx context.Context) error {
			return call(p.node.NodePublishVolume(ctx, publishReq("/etc", staging, p.path("target"), false)))
		}, codes.InvalidArgument},
		{"publish a volume onto the driver root", func(ctx context.Context) error {
			return call(p.node.NodePublishVolume(ctx, publishReq(id, staging, p.srv.Driver.Config().Root, false)))
		}, codes.InvalidArgument},
		{"publish a volume without a capability", func(ctx context.Context) error {
			req := publishReq(id, staging, p.path("target"), false)
			req.VolumeCapability = nil
			return call(p.node.NodePublishVolume(ctx, req))
		}, codes.InvalidArgument},
		{"publish a volume with the block access type", func(ctx context.Context) error {
			req := publishReq(id, staging, p.path("target"), false)
			req.VolumeCapability = blockCap()
			return call(p.node.NodePublishVolume(ctx, req))
		}, codes.InvalidArgument},
		{"publish a volume that is not staged", func(ctx context.Context) error {
			return call(p.node.NodePublishVolume(ctx, publishReq(id, "", p.path("target"), false)))
		}, codes.FailedPrecondition},
		{"publish a volume staged elsewhere", func(ctx context.Context) error {
			return call(p.node.NodePublishVolume(ctx, publishReq(id, p.path("s2"), p.path("target"), false)))
		}, codes.FailedPrecondition},
		{"publish an unknown volume", func(ctx context.Context) error {
			return call(p.node.NodePublishVolume(ctx, publishReq("unknown", staging, p.path("target"), false)))
		}, codes.NotFound},
		{"unpublish a volume at a relative target path", func(ctx context.Context) error {
			return call(p.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: "target"}))
		}, codes.InvalidArgument},
		{"unpublish a volume whose id is empty", func(ctx context.Context) error {
			return call(p.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{TargetPath: p.path("target")}))
		}, codes.InvalidArgument},
		{"get stats without a volume path", func(ctx context.Context) error {
			return call(p.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id}))
		}, codes.InvalidArgument},
		{"get stats at a path where the volume is not", func(ctx context.Context) error {
			return call(p.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: outside}))
		}, codes.NotFound},
		{"controller publish, which needs -attach-required", func(ctx context.Context) error {
			return call(p.ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "node-1", VolumeCapability: writer}))
		}, codes.Unimplemented},
		{"controller unpublish, which needs -attach-required", func(ctx context.Context) error {
			return call(p.ctrl.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "node-1"}))
		}, codes.Unimplemented},
		{"create a snapshot without a name", func(ctx context.Context) error {
			return call(p.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{SourceVolumeId: id}))
		}, codes.InvalidArgument},
		{"create a snapshot of a volume whose id climbs out of the root", func(ctx context.Context) error {
			return call(p.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: "../state"}))
		}, codes.InvalidArgument},
		{"create a snapshot of an unknown volume", func(ctx context.Context) error {
			return call(p.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: "unknown"}))
		}, codes.NotFound},
		{"delete a snapshot whose id climbs out of the root", func(ctx context.Context) error {
			return call(p.ctrl.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: "../volumes/" + id}))
		}, codes.InvalidArgument},
		{"list snapshots from a token the driver did not hand out", func(ctx context.Context) error {
			return call(p.ctrl.ListSnapshots(ctx, &csi.ListSnapshotsRequest{StartingToken: id}))
		}, codes.Aborted},
		{"expand a volume without a capacity range", func(ctx context.Context) error {
			return call(p.ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id}))
		}, codes.InvalidArgument},
		{"expand an unknown volume", func(ctx context.Context) error {
			return call(p.ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: "unknown", CapacityRange: &csi.CapacityRange{RequiredBytes: 1}}))
		}, codes.NotFound},
		{"shrink a volume below its capacity", func(ctx context.Context) error {
			return call(p.ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{LimitBytes: 1}}))
		}, codes.OutOfRange},
		{"expand on the node beyond what the controller granted", func(ctx context.Context) error {
			return call(p.node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: staging, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 20}}))
		}, codes.OutOfRange},
		{"expand on the node at a path where the volume is not", func(ctx context.Context) error {
			return call(p.node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: outside}))
		}, codes.NotFound},
		{"get the controller's health of an unknown volume", func(ctx context.Context) error {
			return call(p.ctrl.ControllerGetVolumeHealth(ctx, &csi.ControllerGetVolumeHealthRequest{VolumeId: "unknown"}))
		}, codes.NotFound},
		{"get a volume whose id is empty", func(ctx context.Context) error {
			return call(p.ctrl.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{}))
		}, codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			requireCode(t, tt.want, tt.call(t.Context()))
		})
	}
	require.Equal(t, before, tree(t, p.dir), "bad input changed files")
}

// call drops an RPC's response, keeping its error.
func call[R any](_ R, err error) error { return err }

// tree lists the paths below dir with their contents (files) or "/" (dirs).
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(path string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			files[path] = "/"
			return err
		}
		data, err := os.ReadFile(path)
		files[path] = string(data)
		return err
	}))
	return files
}

func TestCreateVolumeIsIdempotent(t *testing.T) {
	p := serve(t, config(t))
	first, err := p.ctrl.CreateVolume(t.Context(), createReq("data", 1<<20))
	require.NoError(t, err)
	again, err := p.ctrl.CreateVolume(t.Context(), createReq("data", 1<<20))
	require.NoError(t, err)
	require.Equal(t, first.GetVolume().GetVolumeId(), again.GetVolume().GetVolumeId())
	require.EqualValues(t, 1<<20, again.GetVolume().GetCapacityBytes())
	require.Equal(t, map[string]string{hostpath.TopologyKey: "node-1"}, again.GetVolume().GetAccessibleTopology()[0].GetSegments())

	_, err = p.ctrl.CreateVolume(t.Context(), createReq("data", 2<<20))
	requireCode(t, codes.AlreadyExists, err)
	withParams := createReq("data", 1<<20)
	withParams.Parameters = map[string]string{"tier": "fast"}
	_, err = p.ctrl.CreateVolume(t.Context(), withParams)
	requireCode(t, codes.AlreadyExists, err)

	list, err := p.ctrl.ListVolumes(t.Context(), &csi.ListVolumesRequest{})
	require.NoError(t, err)
	require.Len(t, list.GetEntries(), 1)

	id := first.GetVolume().GetVolumeId()
	p.delete(t, id)
	p.delete(t, id)
	dir, err := p.srv.Driver.VolumePath(id)
	require.NoError(t, err)
	require.NoDirExists(t, dir)
}

func TestValidateVolumeCapabilities(t *testing.T) {
	p := serve(t, config(t))
	id := p.create(t, "v")
	tests := []struct {
		name      string
		caps      []*csi.VolumeCapability
		params    map[string]string
		confirmed bool
		message   string
	}{
		{name: "single node writer mount", caps: []*csi.VolumeCapability{writer}, confirmed: true},
		{name: "block access type", caps: []*csi.VolumeCapability{blockCap()}, message: "only the mount access type"},
		{name: "multi node access mode", caps: []*csi.VolumeCapability{mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)}, message: "only single-node modes"},
		{name: "parameters the volume was not created with", caps: []*csi.VolumeCapability{writer}, params: map[string]string{"tier": "fast"}, message: "has parameters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := p.ctrl.ValidateVolumeCapabilities(t.Context(), &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: tt.caps, Parameters: tt.params})
			require.NoError(t, err)
			require.Equal(t, tt.confirmed, resp.GetConfirmed() != nil)
			require.Contains(t, resp.GetMessage(), tt.message)
		})
	}
}

func TestListVolumesPages(t *testing.T) {
	p := serve(t, config(t))
	var want []string
	for i := range 5 {
		want = append(want, p.create(t, fmt.Sprintf("v%d", i)))
	}
	var got []string
	token := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 3)
		resp, err := p.ctrl.ListVolumes(t.Context(), &csi.ListVolumesRequest{MaxEntries: 2, StartingToken: token})
		require.NoError(t, err)
		for _, e := range resp.GetEntries() {
			got = append(got, e.GetVolume().GetVolumeId())
		}
		if token = resp.GetNextToken(); token == "" {
			break
		}
		// Deleting the volume the token names loses nothing.
		p.delete(t, token)
		want = slices.DeleteFunc(want, func(id string) bool { return id == token })
	}
	require.ElementsMatch(t, want, got)
}

// TestNodeLifecycleIsIdempotent repeats every node RPC and checks the
// conflicts the CSI spec names.
func TestNodeLifecycleIsIdempotent(t *testing.T) {
	p, id, staging := stagedVolume(t, config(t))
	target := p.path("target")
	p.stage(t, id, staging)
	for range 2 {
		_, err := p.node.NodePublishVolume(t.Context(), publishReq(id, staging, target, false))
		require.NoError(t, err)
	}
	_, err := p.node.NodePublishVolume(t.Context(), publishReq(id, staging, target, true))
	requireCode(t, codes.AlreadyExists, err)

	stats, err := p.node.NodeGetVolumeStats(t.Context(), &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
	require.NoError(t, err)
	require.Len(t, stats.GetUsage(), 2)

	_, err = p.node.NodeUnstageVolume(t.Context(), &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
	requireCode(t, codes.FailedPrecondition, err)

	p.unpublish(t, id, target)
	p.unpublish(t, id, target)
	require.NoFileExists(t, target)
	require.NoDirExists(t, target)
	p.unstage(t, id, staging)
	p.unstage(t, id, staging)
	require.DirExists(t, staging, "the staging directory belongs to the CO")
	p.delete(t, id)
	p.delete(t, id)
}

func TestSingleWriterVolumeHasOneTarget(t *testing.T) {
	p, id, staging := stagedVolume(t, config(t))
	req := publishReq(id, staging, p.path("one"), false)
	req.VolumeCapability = mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER)
	_, err := p.node.NodePublishVolume(t.Context(), req)
	require.NoError(t, err)

	req.TargetPath = p.path("two")
	_, err = p.node.NodePublishVolume(t.Context(), req)
	requireCode(t, codes.FailedPrecondition, err)
	require.NoDirExists(t, p.path("two"), "a refused publication leaves no target")
	p.unpublish(t, id, p.path("one"))
}

func TestMaxVolumesLimitsStaging(t *testing.T) {
	cfg := config(t)
	cfg.MaxVolumes = 1
	p := serve(t, cfg)
	info, err := p.node.NodeGetInfo(t.Context(), &csi.NodeGetInfoRequest{})
	require.NoError(t, err)
	require.EqualValues(t, 1, info.GetMaxVolumesPerNode())

	a, b := p.create(t, "a"), p.create(t, "b")
	p.stage(t, a, p.path("a"))
	_, err = p.node.NodeStageVolume(t.Context(), &csi.NodeStageVolumeRequest{VolumeId: b, StagingTargetPath: p.path("b"), VolumeCapability: writer})
	requireCode(t, codes.ResourceExhausted, err)
}

// TestStateSurvivesANewDriver serves a second driver on the same root, as a
// restarted plugin would be: it knows the volumes and stagings of the first.
func TestStateSurvivesANewDriver(t *testing.T) {
	cfg := config(t)
	first := serve(t, cfg)
	id := first.create(t, "v")
	staging := first.path("staging")
	first.stage(t, id, staging)

	second := serve(t, cfg)
	resp, err := second.ctrl.CreateVolume(t.Context(), createReq("v", 1<<20))
	require.NoError(t, err)
	require.Equal(t, id, resp.GetVolume().GetVolumeId())
	_, err = second.node.NodeStageVolume(t.Context(), &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: first.path("elsewhere"), VolumeCapability: writer})
	requireCode(t, codes.FailedPrecondition, err)
	second.unstage(t, id, staging)
}

// TestConcurrentRPCs runs the whole lifecycle of many volumes at once, with
// every volume also created by two callers racing each other.
func TestConcurrentRPCs(t *testing.T) {
	p := serve(t, config(t))
	const volumes = 8
	ids := make([][2]string, volumes)
	var wg sync.WaitGroup
	for i := range volumes {
		for racer := range 2 {
			wg.Go(func() {
				resp, err := p.ctrl.CreateVolume(context.Background(), createReq(fmt.Sprintf("v%d", i), 1<<20))
				if err == nil {
					ids[i][racer] = resp.GetVolume().GetVolumeId()
				}
			})
		}
	}
	wg.Wait()
	for i := range volumes {
		require.NotEmpty(t, ids[i][0])
		require.Equal(t, ids[i][0], ids[i][1], "racing creators of one name get one volume")
	}
	errs := make(chan error, volumes)
	for i := range volumes {
		wg.Go(func() { errs <- lifecycle(p, ids[i][0], i) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	list, err := p.ctrl.ListVolumes(t.Context(), &csi.ListVolumesRequest{})
	require.NoError(t, err)
	require.Empty(t, list.GetEntries())
}

// lifecycle stages, publishes, unpublishes, unstages and deletes a volume.
func lifecycle(p *plugin, id string, i int) error {
	ctx := context.Background()
	staging, target := p.path(fmt.Sprintf("staging%d", i)), p.path(fmt.Sprintf("target%d", i))
	steps := []func() error{
		func() error {
			return call(p.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: writer}))
		},
		func() error { return call(p.node.NodePublishVolume(ctx, publishReq(id, staging, target, false))) },
		func() error {
			return call(p.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}))
		},
		func() error {
			return call(p.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}))
		},
		func() error { return call(p.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("volume %s: %w", id, err)
		}
	}
	return nil
}
