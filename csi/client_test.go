package csi_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"go.uber.org/mock/gomock"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/csitest"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/names"
)

// TestMain checks for leaks and removes the hostpath binary that some of
// the package's tests build.
func TestMain(m *testing.M) {
	hostpathtest.Main(m)
}

// testOptions retries quickly; the RPC timeout is generous because the
// tests that want it to fire set their own.
var testOptions = csi.Options{
	RPCTimeout:     10 * time.Second,
	BackoffInitial: 10 * time.Millisecond,
	BackoffMax:     100 * time.Millisecond,
}

// dial connects to socketPath and closes the client in t's cleanup.
func dial(t *testing.T, socketPath string, opts csi.Options) *csi.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := csi.Dial(ctx, socketPath, opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

// servedMocks serves fresh mocks on a real unix socket and returns them
// with a client connected to it.
func servedMocks(t *testing.T, opts csi.Options) (*csitest.Mocks, *csi.Client) {
	t.Helper()
	m := csitest.NewMocks(t)
	path := csitest.SocketPath(t)
	m.Serve(t, path)
	return m, dial(t, path, opts)
}

// requirePassThrough calls an RPC with req and requires the plugin's
// answer, want, to come back unchanged.
func requirePassThrough[Req, Resp proto.Message](t *testing.T, call func(context.Context, Req) (Resp, error), req Req, want Resp) {
	t.Helper()
	got, err := call(t.Context(), req)
	require.NoError(t, err)
	require.True(t, proto.Equal(want, got), "got %v, want %v", got, want)
}

func TestClientSendsExactlyTheRPCsOfAVolumeLifecycleInOrder(t *testing.T) {
	m, c := servedMocks(t, testOptions)
	eq := csitest.ProtoEq

	mountRW := &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: "ext4"}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	createReq := &csipb.CreateVolumeRequest{Name: "v1", VolumeCapabilities: []*csipb.VolumeCapability{mountRW}}
	createResp := &csipb.CreateVolumeResponse{Volume: &csipb.Volume{VolumeId: "vol-1", CapacityBytes: 1 << 30}}
	validateReq := &csipb.ValidateVolumeCapabilitiesRequest{VolumeId: "vol-1", VolumeCapabilities: []*csipb.VolumeCapability{mountRW}}
	validateResp := &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{VolumeCapabilities: []*csipb.VolumeCapability{mountRW}}}
	publishReq := &csipb.ControllerPublishVolumeRequest{VolumeId: "vol-1", NodeId: "node-1", VolumeCapability: mountRW}
	publishResp := &csipb.ControllerPublishVolumeResponse{PublishContext: map[string]string{"device": "/dev/vdb"}}
	stageReq := &csipb.NodeStageVolumeRequest{VolumeId: "vol-1", PublishContext: publishResp.PublishContext, StagingTargetPath: "/staging/vol-1", VolumeCapability: mountRW}
	nodePublishReq := &csipb.NodePublishVolumeRequest{VolumeId: "vol-1", StagingTargetPath: "/staging/vol-1", TargetPath: "/target/vol-1", VolumeCapability: mountRW}
	statsReq := &csipb.NodeGetVolumeStatsRequest{VolumeId: "vol-1", VolumePath: "/target/vol-1"}
	statsResp := &csipb.NodeGetVolumeStatsResponse{Usage: []*csipb.VolumeUsage{{Total: 1 << 30, Used: 4096, Unit: csipb.VolumeUsage_BYTES}}}
	listReq := &csipb.ListVolumesRequest{MaxEntries: 10}
	listResp := &csipb.ListVolumesResponse{Entries: []*csipb.ListVolumesResponse_Entry{{Volume: createResp.Volume}}}
	expandReq := &csipb.ControllerExpandVolumeRequest{VolumeId: "vol-1", CapacityRange: &csipb.CapacityRange{RequiredBytes: 2 << 30}}
	expandResp := &csipb.ControllerExpandVolumeResponse{CapacityBytes: 2 << 30, NodeExpansionRequired: true}
	nodeUnpublishReq := &csipb.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: "/target/vol-1"}
	unstageReq := &csipb.NodeUnstageVolumeRequest{VolumeId: "vol-1", StagingTargetPath: "/staging/vol-1"}
	unpublishReq := &csipb.ControllerUnpublishVolumeRequest{VolumeId: "vol-1", NodeId: "node-1"}
	deleteReq := &csipb.DeleteVolumeRequest{VolumeId: "vol-1"}

	gomock.InOrder(
		m.Identity.EXPECT().Probe(gomock.Any(), eq(&csipb.ProbeRequest{})).
			Return(&csipb.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil),
		m.Identity.EXPECT().GetPluginInfo(gomock.Any(), eq(&csipb.GetPluginInfoRequest{})).
			Return(&csipb.GetPluginInfoResponse{Name: "disk.csi.example.com", VendorVersion: "1.2.3", Manifest: map[string]string{"commit": "abc"}}, nil),
		m.Identity.EXPECT().GetPluginCapabilities(gomock.Any(), eq(&csipb.GetPluginCapabilitiesRequest{})).
			Return(csitest.PluginCapabilities(
				[]csipb.PluginCapability_Service_Type{csipb.PluginCapability_Service_CONTROLLER_SERVICE, csipb.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS},
				[]csipb.PluginCapability_VolumeExpansion_Type{csipb.PluginCapability_VolumeExpansion_ONLINE}), nil),
		m.Controller.EXPECT().ControllerGetCapabilities(gomock.Any(), eq(&csipb.ControllerGetCapabilitiesRequest{})).
			Return(csitest.ControllerCapabilities(csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME), nil),
		m.Node.EXPECT().NodeGetInfo(gomock.Any(), eq(&csipb.NodeGetInfoRequest{})).
			Return(&csipb.NodeGetInfoResponse{NodeId: "node-1", MaxVolumesPerNode: 16, AccessibleTopology: &csipb.Topology{Segments: map[string]string{"zone": "z1"}}}, nil),
		m.Node.EXPECT().NodeGetCapabilities(gomock.Any(), eq(&csipb.NodeGetCapabilitiesRequest{})).
			Return(csitest.NodeCapabilities(csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME), nil),
		m.Controller.EXPECT().CreateVolume(gomock.Any(), eq(createReq)).Return(createResp, nil),
		m.Controller.EXPECT().ValidateVolumeCapabilities(gomock.Any(), eq(validateReq)).Return(validateResp, nil),
		m.Controller.EXPECT().ControllerPublishVolume(gomock.Any(), eq(publishReq)).Return(publishResp, nil),
		m.Node.EXPECT().NodeStageVolume(gomock.Any(), eq(stageReq)).Return(&csipb.NodeStageVolumeResponse{}, nil),
		m.Node.EXPECT().NodePublishVolume(gomock.Any(), eq(nodePublishReq)).Return(&csipb.NodePublishVolumeResponse{}, nil),
		m.Node.EXPECT().NodeGetVolumeStats(gomock.Any(), eq(statsReq)).Return(statsResp, nil),
		m.Controller.EXPECT().ListVolumes(gomock.Any(), eq(listReq)).Return(listResp, nil),
		m.Controller.EXPECT().ControllerExpandVolume(gomock.Any(), eq(expandReq)).Return(expandResp, nil),
		m.Node.EXPECT().NodeUnpublishVolume(gomock.Any(), eq(nodeUnpublishReq)).Return(&csipb.NodeUnpublishVolumeResponse{}, nil),
		m.Node.EXPECT().NodeUnstageVolume(gomock.Any(), eq(unstageReq)).Return(&csipb.NodeUnstageVolumeResponse{}, nil),
		m.Controller.EXPECT().ControllerUnpublishVolume(gomock.Any(), eq(unpublishReq)).Return(&csipb.ControllerUnpublishVolumeResponse{}, nil),
		m.Controller.EXPECT().DeleteVolume(gomock.Any(), eq(deleteReq)).Return(&csipb.DeleteVolumeResponse{}, nil),
	)

	ctx := t.Context()
	ready, err := c.Probe(ctx)
	require.NoError(t, err)
	require.True(t, ready)

	info, err := c.GetPluginInfo(ctx)
	require.NoError(t, err)
	require.Equal(t, csi.PluginInfo{Name: "disk.csi.example.com", VendorVersion: "1.2.3", Manifest: map[string]string{"commit": "abc"}}, info)

	pluginCaps, err := c.GetPluginCapabilities(ctx)
	require.NoError(t, err)
	require.Equal(t, csi.PluginCapabilities{ControllerService: true, VolumeAccessibilityConstraints: true, OnlineVolumeExpansion: true}, pluginCaps)

	controllerCaps, err := c.ControllerGetCapabilities(ctx)
	require.NoError(t, err)
	require.Equal(t, csi.ControllerCapabilities{CreateDeleteVolume: true, PublishUnpublishVolume: true}, controllerCaps)

	nodeInfo, err := c.NodeGetInfo(ctx)
	require.NoError(t, err)
	require.Equal(t, csi.NodeInfo{NodeID: "node-1", MaxVolumes: 16, AccessibleTopology: map[string]string{"zone": "z1"}}, nodeInfo)

	nodeCaps, err := c.NodeGetCapabilities(ctx)
	require.NoError(t, err)
	require.Equal(t, csi.NodeCapabilities{StageUnstageVolume: true}, nodeCaps)

	requirePassThrough(t, c.CreateVolume, createReq, createResp)
	requirePassThrough(t, c.ValidateVolumeCapabilities, validateReq, validateResp)
	requirePassThrough(t, c.ControllerPublishVolume, publishReq, publishResp)
	requirePassThrough(t, c.NodeStageVolume, stageReq, &csipb.NodeStageVolumeResponse{})
	requirePassThrough(t, c.NodePublishVolume, nodePublishReq, &csipb.NodePublishVolumeResponse{})
	requirePassThrough(t, c.NodeGetVolumeStats, statsReq, statsResp)
	requirePassThrough(t, c.ListVolumes, listReq, listResp)
	requirePassThrough(t, c.ControllerExpandVolume, expandReq, expandResp)
	requirePassThrough(t, c.NodeUnpublishVolume, nodeUnpublishReq, &csipb.NodeUnpublishVolumeResponse{})
	requirePassThrough(t, c.NodeUnstageVolume, unstageReq, &csipb.NodeUnstageVolumeResponse{})
	requirePassThrough(t, c.ControllerUnpublishVolume, unpublishReq, &csipb.ControllerUnpublishVolumeResponse{})
	requirePassThrough(t, c.DeleteVolume, deleteReq, &csipb.DeleteVolumeResponse{})
}

func TestClientSendsAuthorityLocalhost(t *testing.T) {
	m, c := servedMocks(t, testOptions)
	m.Identity.EXPECT().Probe(gomock.Any(), gomock.Any()).DoAndReturn(
		func(ctx context.Context, _ *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			if got := md.Get(":authority"); len(got) != 1 || got[0] != "localhost" {
				return nil, status.Errorf(codes.InvalidArgument, "authority %q, want localhost", got)
			}
			return &csipb.ProbeResponse{}, nil
		})

	ready, err := c.Probe(t.Context())
	require.NoError(t, err)
	require.True(t, ready)
}

func TestDialWaitsForASocketThatAppearsLate(t *testing.T) {
	m := csitest.NewMocks(t)
	path := csitest.SocketPath(t)
	srv := csitest.NewServer(t, m.Services())
	listened := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		listened <- srv.Listen(path)
	}()
	m.Identity.EXPECT().Probe(gomock.Any(), gomock.Any()).Return(&csipb.ProbeResponse{}, nil)

	c := dial(t, path, testOptions)
	require.NoError(t, <-listened)
	ready, err := c.Probe(t.Context())
	require.NoError(t, err)
	require.True(t, ready)
}

func TestDialGivesUpWhenTheContextEndsBeforeTheSocketAppears(t *testing.T) {
	path := csitest.SocketPath(t)

	t.Run("deadline passes while waiting", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		c, err := csi.Dial(ctx, path, testOptions)
		require.Nil(t, c)
		require.ErrorIs(t, err, csi.ErrConnect)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorContains(t, err, `cannot connect to "`+path+`"`)
		require.ErrorContains(t, err, "no such file or directory")
	})

	t.Run("context already cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := csi.Dial(ctx, path, testOptions)
		require.ErrorIs(t, err, csi.ErrConnect)
		require.ErrorIs(t, err, context.Canceled)
	})
}

// TestDialWithFailFastGivesUpAtOnceWhenNoPluginIsThere: with FailFast, a
// socket that does not exist, or one nothing listens on (a plugin that
// died and left its socket file), ends Dial at its first attempt, with the
// reason, rather than at the end of its context (a minute here).
func TestDialWithFailFastGivesUpAtOnceWhenNoPluginIsThere(t *testing.T) {
	missing := csitest.SocketPath(t)
	dead := csitest.SocketPath(t)
	l, err := net.Listen("unix", dead)
	require.NoError(t, err)
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	require.NoError(t, l.Close())

	for path, want := range map[string]string{missing: "the socket does not exist", dead: "nothing listens on the socket"} {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		c, err := csi.Dial(ctx, path, csi.Options{FailFast: true})
		cancel()
		require.Nil(t, c)
		require.ErrorIs(t, err, csi.ErrConnect)
		require.NotErrorIs(t, err, context.DeadlineExceeded, "Dial waited for its context")
		require.ErrorContains(t, err, want)
	}
}

func TestSocketPathsAreChecked(t *testing.T) {
	longest := "/" + strings.Repeat("s", csi.MaxSocketPathLen-1)
	tests := []struct {
		name    string
		path    string
		wantErr error
		wantMsg string
	}{
		{name: "absolute path of 107 bytes is fine", path: longest},
		{name: "absolute path of 108 bytes is too long", path: longest + "s",
			wantErr: csi.ErrSocketPathTooLong, wantMsg: "is 108 bytes, over the unix limit of 107; use a shorter directory"},
		{name: "relative path is refused", path: "plugins/csi.sock",
			wantErr: csi.ErrSocketPathNotAbsolute, wantMsg: `socket path is not absolute: socket path "plugins/csi.sock" must be absolute`},
		{name: "empty path is refused", path: "",
			wantErr: csi.ErrSocketPathNotAbsolute, wantMsg: `socket path is not absolute: socket path must not be empty`},
		{name: "unclean path is refused", path: "/run//csi.sock",
			wantErr: names.ErrInvalid, wantMsg: `socket path "/run//csi.sock" must be clean`},
		{name: "path with a right-to-left override is refused", path: "/run/\u202ecsi.sock",
			wantErr: names.ErrInvalid, wantMsg: "must not contain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := csi.ValidateSocketPath(tt.path)
			if tt.wantErr == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tt.wantErr)
			require.ErrorContains(t, err, tt.wantMsg)

			c, err := csi.Dial(t.Context(), tt.path, testOptions)
			require.Nil(t, c)
			require.ErrorIs(t, err, tt.wantErr)
		})
	}
}

func TestDialRefusesInvalidOptions(t *testing.T) {
	tests := []struct {
		name    string
		opts    csi.Options
		wantMsg string
	}{
		{name: "negative RPC timeout", opts: csi.Options{RPCTimeout: -time.Second}, wantMsg: "must not be negative"},
		{name: "negative initial backoff", opts: csi.Options{BackoffInitial: -time.Second}, wantMsg: "must not be negative"},
		{name: "maximum backoff below the initial one", opts: csi.Options{BackoffInitial: time.Second, BackoffMax: time.Millisecond},
			wantMsg: "BackoffMax 1ms is shorter than BackoffInitial 1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := csi.Dial(t.Context(), csitest.SocketPath(t), tt.opts)
			require.Nil(t, c)
			require.ErrorIs(t, err, csi.ErrInvalidOptions)
			require.ErrorContains(t, err, tt.wantMsg)
		})
	}
}

func TestOptionsDefaults(t *testing.T) {
	require.Equal(t, csi.Options{
		RPCTimeout:     csi.DefaultRPCTimeout,
		BackoffInitial: csi.DefaultBackoffInitial,
		BackoffMax:     csi.DefaultBackoffMax,
	}, csi.Options{}.WithDefaults())
	require.Equal(t, csi.Options{RPCTimeout: time.Second, BackoffInitial: time.Minute, BackoffMax: time.Minute},
		csi.Options{RPCTimeout: time.Second, BackoffInitial: time.Minute}.WithDefaults(),
		"a default maximum never undercuts a longer initial backoff")
}

// rpc is one RPC of the client: expect records the plugin-side call (a
// gomock recorder method) and call makes it from the client.
type rpc struct {
	name   string
	expect func(ctx, req any) *gomock.Call
	call   func(context.Context) error
}

// noRequest adapts a client method that takes no request.
func noRequest[T any](method func(context.Context) (T, error)) func(context.Context) error {
	return withRequest(func(ctx context.Context, _ struct{}) (T, error) { return method(ctx) }, struct{}{})
}

// withRequest adapts a pass-through client method.
func withRequest[Req, Resp any](method func(context.Context, Req) (Resp, error), req Req) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := method(ctx, req)
		return err
	}
}

// everyRPC lists every RPC of c, served by m.
func everyRPC(m *csitest.Mocks, c *csi.Client) []rpc {
	id, ctl, node := m.Identity.EXPECT(), m.Controller.EXPECT(), m.Node.EXPECT()
	return []rpc{
		{"GetPluginInfo", id.GetPluginInfo, noRequest(c.GetPluginInfo)},
		{"GetPluginCapabilities", id.GetPluginCapabilities, noRequest(c.GetPluginCapabilities)},
		{"Probe", id.Probe, noRequest(c.Probe)},
		{"ControllerGetCapabilities", ctl.ControllerGetCapabilities, noRequest(c.ControllerGetCapabilities)},
		{"CreateVolume", ctl.CreateVolume, withRequest(c.CreateVolume, &csipb.CreateVolumeRequest{Name: "v1"})},
		{"DeleteVolume", ctl.DeleteVolume, withRequest(c.DeleteVolume, &csipb.DeleteVolumeRequest{VolumeId: "v1"})},
		{"ControllerPublishVolume", ctl.ControllerPublishVolume, withRequest(c.ControllerPublishVolume, &csipb.ControllerPublishVolumeRequest{VolumeId: "v1"})},
		{"ControllerUnpublishVolume", ctl.ControllerUnpublishVolume, withRequest(c.ControllerUnpublishVolume, &csipb.ControllerUnpublishVolumeRequest{VolumeId: "v1"})},
		{"ValidateVolumeCapabilities", ctl.ValidateVolumeCapabilities, withRequest(c.ValidateVolumeCapabilities, &csipb.ValidateVolumeCapabilitiesRequest{VolumeId: "v1"})},
		{"ListVolumes", ctl.ListVolumes, withRequest(c.ListVolumes, &csipb.ListVolumesRequest{})},
		{"ControllerExpandVolume", ctl.ControllerExpandVolume, withRequest(c.ControllerExpandVolume, &csipb.ControllerExpandVolumeRequest{VolumeId: "v1"})},
		{"NodeGetInfo", node.NodeGetInfo, noRequest(c.NodeGetInfo)},
		{"NodeGetCapabilities", node.NodeGetCapabilities, noRequest(c.NodeGetCapabilities)},
		{"NodeStageVolume", node.NodeStageVolume, withRequest(c.NodeStageVolume, &csipb.NodeStageVolumeRequest{VolumeId: "v1"})},
		{"NodeUnstageVolume", node.NodeUnstageVolume, withRequest(c.NodeUnstageVolume, &csipb.NodeUnstageVolumeRequest{VolumeId: "v1"})},
		{"NodePublishVolume", node.NodePublishVolume, withRequest(c.NodePublishVolume, &csipb.NodePublishVolumeRequest{VolumeId: "v1"})},
		{"NodeUnpublishVolume", node.NodeUnpublishVolume, withRequest(c.NodeUnpublishVolume, &csipb.NodeUnpublishVolumeRequest{VolumeId: "v1"})},
		{"NodeGetVolumeStats", node.NodeGetVolumeStats, withRequest(c.NodeGetVolumeStats, &csipb.NodeGetVolumeStatsRequest{VolumeId: "v1"})},
	}
}

func TestEveryRPCGivesUpAfterTheRPCTimeout(t *testing.T) {
	opts := testOptions
	opts.RPCTimeout = 100 * time.Millisecond
	m, c := servedMocks(t, opts)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // runs before the server's Stop, which waits for handlers
	block := func(context.Context, any) { <-release }

	for _, r := range everyRPC(m, c) {
		t.Run(r.name, func(t *testing.T) {
			r.expect(gomock.Any(), gomock.Any()).Do(block)
			err := r.call(t.Context())
			require.ErrorIs(t, err, csi.ErrDeadlineExceeded)
			require.ErrorContains(t, err, r.name+": deadline exceeded")
		})
	}
}

func TestEveryRPCMapsThePluginsErrorAndKeepsItsMessage(t *testing.T) {
	m, c := servedMocks(t, testOptions)
	for _, r := range everyRPC(m, c) {
		t.Run(r.name, func(t *testing.T) {
			r.expect(gomock.Any(), gomock.Any()).Return(nil, status.Error(codes.NotFound, `volume "v1" does not exist`))
			err := r.call(t.Context())
			require.ErrorIs(t, err, csi.ErrNotFound)
			require.EqualError(t, err, r.name+`: not found: volume "v1" does not exist`)
		})
	}
}

func TestStatusCodesBecomeSentinelErrors(t *testing.T) {
	tests := []struct {
		name string
		code codes.Code
		want error
	}{
		{"canceled", codes.Canceled, csi.ErrCanceled},
		{"unknown error", codes.Unknown, csi.ErrUnknown},
		{"invalid argument", codes.InvalidArgument, csi.ErrInvalidArgument},
		{"deadline exceeded", codes.DeadlineExceeded, csi.ErrDeadlineExceeded},
		{"not found", codes.NotFound, csi.ErrNotFound},
		{"already exists", codes.AlreadyExists, csi.ErrAlreadyExists},
		{"permission denied", codes.PermissionDenied, csi.ErrPermissionDenied},
		{"resource exhausted", codes.ResourceExhausted, csi.ErrResourceExhausted},
		{"failed precondition", codes.FailedPrecondition, csi.ErrFailedPrecondition},
		{"aborted", codes.Aborted, csi.ErrAborted},
		{"out of range", codes.OutOfRange, csi.ErrOutOfRange},
		{"unimplemented", codes.Unimplemented, csi.ErrUnimplemented},
		{"internal error", codes.Internal, csi.ErrInternal},
		{"unavailable", codes.Unavailable, csi.ErrUnavailable},
		{"data loss", codes.DataLoss, csi.ErrDataLoss},
		{"unauthenticated", codes.Unauthenticated, csi.ErrUnauthenticated},
	}
	m, c := servedMocks(t, testOptions)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m.Node.EXPECT().NodeStageVolume(gomock.Any(), gomock.Any()).Return(nil, status.Error(tt.code, "plugin says why"))
			_, err := c.NodeStageVolume(t.Context(), &csipb.NodeStageVolumeRequest{VolumeId: "v1"})
			require.ErrorIs(t, err, tt.want)
			require.EqualError(t, err, "NodeStageVolume: "+tt.name+": plugin says why")
		})
	}

	t.Run("a code gRPC does not name is an unknown error", func(t *testing.T) {
		m.Node.EXPECT().NodeStageVolume(gomock.Any(), gomock.Any()).Return(nil, status.Error(codes.Code(42), "plugin says why"))
		_, err := c.NodeStageVolume(t.Context(), &csipb.NodeStageVolumeRequest{VolumeId: "v1"})
		require.ErrorIs(t, err, csi.ErrUnknown)
		require.EqualError(t, err, "NodeStageVolume: unknown error: plugin says why")
	})

	t.Run("an empty message leaves just the code", func(t *testing.T) {
		m.Identity.EXPECT().Probe(gomock.Any(), gomock.Any()).Return(nil, status.Error(codes.Unavailable, ""))
		_, err := c.Probe(t.Context())
		require.EqualError(t, err, "Probe: unavailable")
	})
}

func TestUnknownCapabilityValuesAreKept(t *testing.T) {
	m, c := servedMocks(t, testOptions)
	m.Identity.EXPECT().GetPluginCapabilities(gomock.Any(), gomock.Any()).Return(csitest.PluginCapabilities(
		[]csipb.PluginCapability_Service_Type{csipb.PluginCapability_Service_CONTROLLER_SERVICE, 99, 0, 99},
		[]csipb.PluginCapability_VolumeExpansion_Type{csipb.PluginCapability_VolumeExpansion_OFFLINE, 7},
	), nil)
	// 11 (controller) and 4 (node) are VOLUME_CONDITION, sent by drivers
	// built on spec 1.12 and no longer named by 1.13: they are read as such.
	m.Controller.EXPECT().ControllerGetCapabilities(gomock.Any(), gomock.Any()).Return(csitest.ControllerCapabilities(
		csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, 11, csipb.ControllerServiceCapability_RPC_LIST_VOLUME_HEALTH, 18, 11,
	), nil)
	m.Node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).Return(csitest.NodeCapabilities(
		csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME, 4, csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS,
	), nil)

	pluginCaps, err := c.GetPluginCapabilities(t.Context())
	require.NoError(t, err)
	require.Equal(t, csi.PluginCapabilities{
		ControllerService:      true,
		OfflineVolumeExpansion: true,
		Unknown:                []int32{99, 0},
		UnknownVolumeExpansion: []int32{7},
	}, pluginCaps)

	controllerCaps, err := c.ControllerGetCapabilities(t.Context())
	require.NoError(t, err)
	require.Equal(t, csi.ControllerCapabilities{CreateDeleteVolume: true, ListVolumeHealth: true, VolumeCondition: true, Unknown: []int32{18}}, controllerCaps)

	nodeCaps, err := c.NodeGetCapabilities(t.Context())
	require.NoError(t, err)
	require.Equal(t, csi.NodeCapabilities{StageUnstageVolume: true, GetVolumeStats: true, VolumeCondition: true}, nodeCaps)
}

func TestNonsenseAnswersAreErrors(t *testing.T) {
	m, c := servedMocks(t, testOptions)
	tests := []struct {
		name    string
		answer  func()
		call    func(context.Context) error
		wantMsg string
	}{
		{
			name: "plugin info without a name",
			answer: func() {
				m.Identity.EXPECT().GetPluginInfo(gomock.Any(), gomock.Any()).
					Return(&csipb.GetPluginInfoResponse{VendorVersion: "1.0"}, nil)
			},
			call:    noRequest(c.GetPluginInfo),
			wantMsg: "GetPluginInfo: invalid response: plugin name is empty",
		},
		{
			name: "plugin info without a vendor version",
			answer: func() {
				m.Identity.EXPECT().GetPluginInfo(gomock.Any(), gomock.Any()).
					Return(&csipb.GetPluginInfoResponse{Name: "disk.csi.example.com"}, nil)
			},
			call:    noRequest(c.GetPluginInfo),
			wantMsg: `GetPluginInfo: invalid response: vendor version of plugin "disk.csi.example.com" is empty`,
		},
		{
			name: "node info without a node ID",
			answer: func() {
				m.Node.EXPECT().NodeGetInfo(gomock.Any(), gomock.Any()).
					Return(&csipb.NodeGetInfoResponse{MaxVolumesPerNode: 3}, nil)
			},
			call:    noRequest(c.NodeGetInfo),
			wantMsg: "NodeGetInfo: invalid response: node ID is empty",
		},
		{
			name: "node info with a negative volume limit",
			answer: func() {
				m.Node.EXPECT().NodeGetInfo(gomock.Any(), gomock.Any()).
					Return(&csipb.NodeGetInfoResponse{NodeId: "node-1", MaxVolumesPerNode: -1}, nil)
			},
			call:    noRequest(c.NodeGetInfo),
			wantMsg: "NodeGetInfo: invalid response: max volumes per node is negative (-1)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.answer()
			err := tt.call(t.Context())
			require.ErrorIs(t, err, csi.ErrInvalidResponse)
			require.EqualError(t, err, tt.wantMsg)
		})
	}
}

func TestProbeReadiness(t *testing.T) {
	tests := []struct {
		name  string
		ready *wrapperspb.BoolValue
		want  bool
	}{
		{name: "ready left unset means ready", ready: nil, want: true},
		{name: "ready true", ready: wrapperspb.Bool(true), want: true},
		{name: "ready false", ready: wrapperspb.Bool(false), want: false},
	}
	m, c := servedMocks(t, testOptions)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m.Identity.EXPECT().Probe(gomock.Any(), gomock.Any()).Return(&csipb.ProbeResponse{Ready: tt.ready}, nil)
			ready, err := c.Probe(t.Context())
			require.NoError(t, err)
			require.Equal(t, tt.want, ready)
		})
	}
}

func TestNilRequestIsRefusedWithoutAnRPC(t *testing.T) {
	_, c := servedMocks(t, testOptions) // no expectations: an RPC would fail the test
	_, err := c.NodePublishVolume(t.Context(), nil)
	require.ErrorIs(t, err, csi.ErrInvalidArgument)
	require.EqualError(t, err, "NodePublishVolume: invalid argument: request must not be nil")
}

func TestClosedClientRefusesRPCs(t *testing.T) {
	m := csitest.NewMocks(t)
	path := csitest.SocketPath(t)
	m.Serve(t, path)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := csi.Dial(ctx, path, testOptions)
	require.NoError(t, err)

	require.NoError(t, c.Close())
	require.NoError(t, c.Close(), "a second Close is harmless")
	_, err = c.Probe(t.Context())
	require.ErrorIs(t, err, csi.ErrClosed)
	require.EqualError(t, err, "Probe: client is closed")
}

// each returns wrap(v) for every v in values.

func TestNodeGetCapabilitiesIsSentAgainAfterAnUnavailableAnswer(t *testing.T) {
	m, c := servedMocks(t, testOptions)
	gomock.InOrder(
		m.Node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).Return(nil, status.Error(codes.Unavailable, "the old transport")),
		m.Node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).Return(&csipb.NodeGetCapabilitiesResponse{}, nil),
	)
	_, err := c.NodeGetCapabilities(t.Context())
	require.NoError(t, err, "a side-effect-free call is sent again once the plugin is reachable")

	m.Node.EXPECT().NodeStageVolume(gomock.Any(), gomock.Any()).Return(nil, status.Error(codes.Unavailable, "busy")).Times(1)
	_, err = c.NodeStageVolume(t.Context(), &csipb.NodeStageVolumeRequest{VolumeId: "v1"})
	require.ErrorIs(t, err, csi.ErrUnavailable, "a volume RPC is never sent again by the client")
}
