package hostpath_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/errclass"
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
			require.ErrorIs(t, err, errclass.Invalid)
			require.True(t, strings.HasPrefix(err.Error(), "invalid config: "), "no package prefix: %v", err)
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
