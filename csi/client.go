package csi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/plugvisor/plugvisor/names"
)

// MaxSocketPathLen is the longest unix socket path, in bytes, that fits in
// sun_path (108 bytes on Linux, one of them the terminating NUL): the
// limit of package names, which every layer checks, so a path the registry
// accepts can be dialled.
const MaxSocketPathLen = names.MaxSocketPathLen

// ValidateSocketPath reports whether path can name a CSI plugin's unix
// socket, by the rules of names.CheckSocketPath: absolute, at most
// [MaxSocketPathLen] bytes, clean, and free of control, bidirectional and
// zero-width characters. The error wraps [ErrSocketPathNotAbsolute] or
// [ErrSocketPathTooLong] for those two faults, and names.ErrInvalid always.
func ValidateSocketPath(path string) error {
	err := names.CheckSocketPath("socket path", path)
	switch {
	case err == nil:
		return nil
	case !filepath.IsAbs(path):
		return fmt.Errorf("%w: %w", ErrSocketPathNotAbsolute, err)
	case len(path) > MaxSocketPathLen:
		return fmt.Errorf("%w: %w", ErrSocketPathTooLong, err)
	}
	return err
}

// Options tunes a [Client]. The zero value of a field means its default (see
// [Options.WithDefaults]); negative values are refused by [Dial].
type Options struct {
	// RPCTimeout bounds every RPC on top of the caller's context.
	// Default 10s.
	RPCTimeout time.Duration
	// BackoffInitial is the wait after the first failed connection attempt;
	// each further failure doubles it (with 20% jitter) up to BackoffMax.
	// Default 100ms.
	BackoffInitial time.Duration
	// BackoffMax caps the wait between connection attempts, including
	// reconnections after a plugin restarts. Default 5s, or BackoffInitial
	// when that is longer.
	BackoffMax time.Duration
	// FailFast makes Dial give up at the first attempt that finds no
	// socket at the path, or nothing listening on it (connection
	// refused), rather than wait for the plugin to appear until its
	// context ends. Other failures are retried as without it.
	FailFast bool
}

// Default values of [Options].
const (
	DefaultRPCTimeout     = 10 * time.Second
	DefaultBackoffInitial = 100 * time.Millisecond
	DefaultBackoffMax     = 5 * time.Second
)

// WithDefaults returns o with every zero field set to its default.
func (o Options) WithDefaults() Options {
	if o.RPCTimeout == 0 {
		o.RPCTimeout = DefaultRPCTimeout
	}
	if o.BackoffInitial == 0 {
		o.BackoffInitial = DefaultBackoffInitial
	}
	if o.BackoffMax == 0 {
		o.BackoffMax = max(DefaultBackoffMax, o.BackoffInitial)
	}
	return o
}

// validate checks options that WithDefaults has filled.
func (o Options) validate() error {
	switch {
	case o.RPCTimeout < 0 || o.BackoffInitial < 0 || o.BackoffMax < 0:
		return fmt.Errorf("%w: durations must not be negative: %+v", ErrInvalidOptions, o)
	case o.BackoffMax < o.BackoffInitial:
		return fmt.Errorf("%w: BackoffMax %s is shorter than BackoffInitial %s",
			ErrInvalidOptions, o.BackoffMax, o.BackoffInitial)
	}
	return nil
}

// Client is a connection to one CSI plugin's unix socket. It is safe for
// concurrent use. Close releases it.
type Client struct {
	conn       *grpc.ClientConn
	identity   csipb.IdentityClient
	controller csipb.ControllerClient
	node       csipb.NodeClient
	opts       Options
	closed     atomic.Bool
	closeOnce  sync.Once
	closeErr   error
	// caps holds the plugin's capabilities while one transport of the
	// connection stays up; gRPC tells it of each transport's start and end.
	caps *capsCache
}

// Dial connects to the CSI plugin listening on socketPath and returns once
// the connection is ready. Until ctx ends it keeps trying, waiting between
// attempts with exponential backoff capped at opts.BackoffMax, so the
// socket may appear after Dial is called. When ctx ends first, the error
// wraps [ErrConnect], the context's error, and says why the last attempt
// failed. The path is checked with [ValidateSocketPath] before anything else.
// With [Options.FailFast], a missing socket or one nothing listens on ends
// Dial at once, with the same error.
func Dial(ctx context.Context, socketPath string, opts Options) (*Client, error) {
	if err := ValidateSocketPath(socketPath); err != nil {
		return nil, err
	}
	opts = opts.WithDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	dialer := &unixDialer{path: socketPath}
	caps := &capsCache{}
	conn, err := grpc.NewClient("passthrough:///csi",
		grpc.WithStatsHandler(caps),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("localhost"),
		grpc.WithContextDialer(dialer.dial),
		grpc.WithChainUnaryInterceptor(retryUnavailable),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  opts.BackoffInitial,
				Multiplier: 2,
				Jitter:     0.2,
				MaxDelay:   opts.BackoffMax,
			},
			// Each attempt gets at least the RPC timeout to connect, not
			// just the current backoff: with a short backoff and many
			// plugins dialled at once, attempts would otherwise never
			// finish.
			MinConnectTimeout: opts.RPCTimeout,
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("%w to %q: %w", ErrConnect, socketPath, err)
	}
	gone := func() error { return nil }
	if opts.FailFast {
		gone = dialer.gone
	}
	if err := waitReady(ctx, conn, gone); err != nil {
		_ = conn.Close()
		if last := dialer.lastError(); last != nil && !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w to %q: %w (last attempt: %v)", ErrConnect, socketPath, err, last)
		}
		return nil, fmt.Errorf("%w to %q: %w", ErrConnect, socketPath, err)
	}
	c := &Client{
		conn:       conn,
		identity:   csipb.NewIdentityClient(conn),
		controller: csipb.NewControllerClient(conn),
		node:       csipb.NewNodeClient(conn),
		opts:       opts,
		caps:       caps,
	}
	return c, nil
}

// waitReady asks conn to connect and waits until it is ready or ctx ends;
// gRPC retries failed attempts with the backoff given to grpc.NewClient.
// After a failed attempt, a non-nil error of gone ends the wait.
func waitReady(ctx context.Context, conn *grpc.ClientConn, gone func() error) error {
	for {
		state := conn.GetState()
		switch state {
		case connectivity.Ready:
			return nil
		case connectivity.Idle:
			conn.Connect()
		case connectivity.Shutdown:
			return ErrClosed
		case connectivity.TransientFailure:
			if err := gone(); err != nil {
				return err
			}
		}
		if !conn.WaitForStateChange(ctx, state) {
			return ctx.Err()
		}
	}
}

// unixDialer dials one unix socket and remembers the latest failure, so
// that Dial can say why it could not connect.
type unixDialer struct {
	path string
	mu   sync.Mutex
	last error
}

func (d *unixDialer) dial(ctx context.Context, _ string) (net.Conn, error) {
	var nd net.Dialer
	conn, err := nd.DialContext(ctx, "unix", d.path)
	d.mu.Lock()
	d.last = err
	d.mu.Unlock()
	return conn, err
}

func (d *unixDialer) lastError() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last
}

// gone says why the plugin is not there when the last attempt found no
// socket at the path, or nothing listening on it; nil otherwise.
func (d *unixDialer) gone() error {
	err := d.lastError()
	switch {
	case errors.Is(err, syscall.ENOENT):
		return fmt.Errorf("the socket does not exist (%w): the plugin is gone or not started", syscall.ENOENT)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("nothing listens on the socket (%w): the plugin is gone or not started", syscall.ECONNREFUSED)
	}
	return nil
}

// Close releases the connection. RPCs after Close fail with [ErrClosed].
// Calling Close again returns the first call's result.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		if err := c.conn.Close(); err != nil {
			c.closeErr = fmt.Errorf("close: %w", err)
		}
	})
	return c.closeErr
}

// invoke runs one RPC under the client's RPC timeout and maps its error.
func invoke[Req comparable, Resp any](
	ctx context.Context, c *Client, rpc string,
	method func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req,
) (Resp, error) {
	var zeroResp Resp
	var nilReq Req
	if req == nilReq {
		return zeroResp, fmt.Errorf("%s: %w: request must not be nil", rpc, ErrInvalidArgument)
	}
	if c.closed.Load() {
		return zeroResp, fmt.Errorf("%s: %w", rpc, ErrClosed)
	}
	rpcCtx, cancel := context.WithTimeout(ctx, c.opts.RPCTimeout)
	defer cancel()
	resp, err := method(rpcCtx, req)
	if err != nil {
		return zeroResp, rpcError(rpc, err)
	}
	return resp, nil
}

// PluginInfo is a plugin's identity (GetPluginInfo).
type PluginInfo struct {
	Name          string
	VendorVersion string
	Manifest      map[string]string
}

// GetPluginInfo asks the plugin for its name and version. A plugin that
// answers without a name or a vendor version gives [ErrInvalidResponse].
func (c *Client) GetPluginInfo(ctx context.Context) (PluginInfo, error) {
	const rpc = "GetPluginInfo"
	resp, err := invoke(ctx, c, rpc, c.identity.GetPluginInfo, &csipb.GetPluginInfoRequest{})
	if err != nil {
		return PluginInfo{}, err
	}
	info := PluginInfo{Name: resp.GetName(), VendorVersion: resp.GetVendorVersion(), Manifest: resp.GetManifest()}
	switch {
	case info.Name == "":
		return PluginInfo{}, invalidResponse(rpc, "plugin name is empty")
	case info.VendorVersion == "":
		return PluginInfo{}, invalidResponse(rpc, "vendor version of plugin %q is empty", info.Name)
	}
	return info, nil
}

// GetPluginCapabilities asks the plugin which services it offers.
func (c *Client) GetPluginCapabilities(ctx context.Context) (PluginCapabilities, error) {
	resp, err := invoke(ctx, c, "GetPluginCapabilities", c.identity.GetPluginCapabilities,
		&csipb.GetPluginCapabilitiesRequest{})
	if err != nil {
		return PluginCapabilities{}, err
	}
	return pluginCapabilitiesFrom(resp.GetCapabilities()), nil
}

// Probe asks the plugin whether it is ready. A plugin that leaves the
// ready field unset is ready (CSI spec). A plugin that is unhealthy
// answers with an error status, returned as an error.
func (c *Client) Probe(ctx context.Context) (bool, error) {
	resp, err := invoke(ctx, c, "Probe", c.identity.Probe, &csipb.ProbeRequest{})
	if err != nil {
		return false, err
	}
	if resp.GetReady() == nil {
		return true, nil
	}
	return resp.GetReady().GetValue(), nil
}

// ControllerGetCapabilities asks the plugin's Controller service which RPCs it supports.
func (c *Client) ControllerGetCapabilities(ctx context.Context) (ControllerCapabilities, error) {
	resp, err := invoke(ctx, c, "ControllerGetCapabilities", c.controller.ControllerGetCapabilities,
		&csipb.ControllerGetCapabilitiesRequest{})
	if err != nil {
		return ControllerCapabilities{}, err
	}
	return controllerCapabilitiesFrom(resp.GetCapabilities()), nil
}

// CreateVolume passes the request to the plugin's Controller service.
func (c *Client) CreateVolume(ctx context.Context, req *csipb.CreateVolumeRequest) (*csipb.CreateVolumeResponse, error) {
	return invoke(ctx, c, "CreateVolume", c.controller.CreateVolume, req)
}

// DeleteVolume passes the request to the plugin's Controller service.
func (c *Client) DeleteVolume(ctx context.Context, req *csipb.DeleteVolumeRequest) (*csipb.DeleteVolumeResponse, error) {
	return invoke(ctx, c, "DeleteVolume", c.controller.DeleteVolume, req)
}

// ControllerPublishVolume passes the request to the plugin's Controller service.
func (c *Client) ControllerPublishVolume(ctx context.Context, req *csipb.ControllerPublishVolumeRequest) (*csipb.ControllerPublishVolumeResponse, error) {
	return invoke(ctx, c, "ControllerPublishVolume", c.controller.ControllerPublishVolume, req)
}

// ControllerUnpublishVolume passes the request to the plugin's Controller service.
func (c *Client) ControllerUnpublishVolume(ctx context.Context, req *csipb.ControllerUnpublishVolumeRequest) (*csipb.ControllerUnpublishVolumeResponse, error) {
	return invoke(ctx, c, "ControllerUnpublishVolume", c.controller.ControllerUnpublishVolume, req)
}

// ValidateVolumeCapabilities passes the request to the plugin's Controller service.
func (c *Client) ValidateVolumeCapabilities(ctx context.Context, req *csipb.ValidateVolumeCapabilitiesRequest) (*csipb.ValidateVolumeCapabilitiesResponse, error) {
	return invoke(ctx, c, "ValidateVolumeCapabilities", c.controller.ValidateVolumeCapabilities, req)
}

// ListVolumes passes the request to the plugin's Controller service.
func (c *Client) ListVolumes(ctx context.Context, req *csipb.ListVolumesRequest) (*csipb.ListVolumesResponse, error) {
	return invoke(ctx, c, "ListVolumes", c.controller.ListVolumes, req)
}

// ControllerExpandVolume passes the request to the plugin's Controller service.
func (c *Client) ControllerExpandVolume(ctx context.Context, req *csipb.ControllerExpandVolumeRequest) (*csipb.ControllerExpandVolumeResponse, error) {
	return invoke(ctx, c, "ControllerExpandVolume", c.controller.ControllerExpandVolume, req)
}

// CreateSnapshot passes the request to the plugin's Controller service.
func (c *Client) CreateSnapshot(ctx context.Context, req *csipb.CreateSnapshotRequest) (*csipb.CreateSnapshotResponse, error) {
	return invoke(ctx, c, "CreateSnapshot", c.controller.CreateSnapshot, req)
}

// DeleteSnapshot passes the request to the plugin's Controller service.
func (c *Client) DeleteSnapshot(ctx context.Context, req *csipb.DeleteSnapshotRequest) (*csipb.DeleteSnapshotResponse, error) {
	return invoke(ctx, c, "DeleteSnapshot", c.controller.DeleteSnapshot, req)
}

// ListSnapshots passes the request to the plugin's Controller service.
func (c *Client) ListSnapshots(ctx context.Context, req *csipb.ListSnapshotsRequest) (*csipb.ListSnapshotsResponse, error) {
	return invoke(ctx, c, "ListSnapshots", c.controller.ListSnapshots, req)
}

// NodeInfo is what a plugin's Node service says about the node (NodeGetInfo).
type NodeInfo struct {
	// NodeID is the plugin's name for this node, used in ControllerPublishVolume.
	NodeID string
	// MaxVolumes is how many volumes the plugin can publish on this node;
	// 0 means the plugin sets no limit.
	MaxVolumes int64
	// AccessibleTopology holds the topology segments from which this node
	// is reachable; nil when the plugin reports none.
	AccessibleTopology map[string]string
}

// NodeGetInfo asks the plugin's Node service about this node. A plugin that
// answers without a node ID or with a negative volume limit gives
// [ErrInvalidResponse].
func (c *Client) NodeGetInfo(ctx context.Context) (NodeInfo, error) {
	const rpc = "NodeGetInfo"
	resp, err := invoke(ctx, c, rpc, c.node.NodeGetInfo, &csipb.NodeGetInfoRequest{})
	if err != nil {
		return NodeInfo{}, err
	}
	info := NodeInfo{
		NodeID:             resp.GetNodeId(),
		MaxVolumes:         resp.GetMaxVolumesPerNode(),
		AccessibleTopology: resp.GetAccessibleTopology().GetSegments(),
	}
	switch {
	case info.NodeID == "":
		return NodeInfo{}, invalidResponse(rpc, "node ID is empty")
	case info.MaxVolumes < 0:
		return NodeInfo{}, invalidResponse(rpc, "max volumes per node is negative (%d)", info.MaxVolumes)
	}
	return info, nil
}

// NodeGetCapabilities asks the plugin's Node service which RPCs it supports.
func (c *Client) NodeGetCapabilities(ctx context.Context) (NodeCapabilities, error) {
	resp, err := invoke(ctx, c, "NodeGetCapabilities", c.node.NodeGetCapabilities,
		&csipb.NodeGetCapabilitiesRequest{})
	if err != nil {
		return NodeCapabilities{}, err
	}
	return nodeCapabilitiesFrom(resp.GetCapabilities()), nil
}

// NodeStageVolume passes the request to the plugin's Node service.
func (c *Client) NodeStageVolume(ctx context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	return invoke(ctx, c, "NodeStageVolume", c.node.NodeStageVolume, req)
}

// NodeUnstageVolume passes the request to the plugin's Node service.
func (c *Client) NodeUnstageVolume(ctx context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	return invoke(ctx, c, "NodeUnstageVolume", c.node.NodeUnstageVolume, req)
}

// NodePublishVolume passes the request to the plugin's Node service.
func (c *Client) NodePublishVolume(ctx context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	return invoke(ctx, c, "NodePublishVolume", c.node.NodePublishVolume, req)
}

// NodeUnpublishVolume passes the request to the plugin's Node service.
func (c *Client) NodeUnpublishVolume(ctx context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	return invoke(ctx, c, "NodeUnpublishVolume", c.node.NodeUnpublishVolume, req)
}

// NodeGetVolumeStats passes the request to the plugin's Node service.
func (c *Client) NodeGetVolumeStats(ctx context.Context, req *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	return invoke(ctx, c, "NodeGetVolumeStats", c.node.NodeGetVolumeStats, req)
}

// NodeExpandVolume passes the request to the plugin's Node service.
func (c *Client) NodeExpandVolume(ctx context.Context, req *csipb.NodeExpandVolumeRequest) (*csipb.NodeExpandVolumeResponse, error) {
	return invoke(ctx, c, "NodeExpandVolume", c.node.NodeExpandVolume, req)
}
