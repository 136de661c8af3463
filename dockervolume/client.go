package dockervolume

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/plugvisor/plugvisor/discovery"
	"github.com/plugvisor/plugvisor/errclass"
)

// PluginType is the plugvisor plugin type of Docker volume plugins.
const PluginType = discovery.TypeDockerVolume

// Scopes a volume driver reports in its capabilities.
const (
	// ScopeLocal: the driver's volumes exist on this node only.
	ScopeLocal = "local"
	// ScopeGlobal: the driver's volumes exist once for the whole cluster.
	ScopeGlobal = "global"
)

// The time Docker gives each call. A call gets it unless its context has an
// earlier deadline.
const (
	// LongTimeout bounds Create and Mount.
	LongTimeout = 2 * time.Minute
	// ShortTimeout bounds every other call.
	ShortTimeout = 1 * time.Minute
)

// Sentinel errors of the client. Errors from the plugin or the connection
// wrap discovery's sentinels (discovery.ErrPluginFailed carrying the
// plugin's own text, discovery.ErrTimeout, ...).
var (
	// ErrInvalidArgument: the call was refused before anything was sent.
	ErrInvalidArgument = errclass.New(errclass.Invalid, "invalid argument")
	// ErrNoSuchVolume: Get answered without a volume.
	ErrNoSuchVolume = errclass.New(errclass.NotFound, "no such volume")
	// ErrUnknownScope: Capabilities gave a scope other than local or global.
	ErrUnknownScope = errclass.New(errclass.Upstream, "unknown scope")
)

// Volume is a volume as a plugin describes it in Get and List.
type Volume struct {
	Name string
	// Mountpoint is where the volume is mounted on the host, if it is.
	Mountpoint string `json:",omitempty"`
	// CreatedAt is the creation time as the plugin sent it (RFC 3339 in
	// Docker's protocol), empty if it sent none.
	CreatedAt string `json:",omitempty"`
	// Status is free-form, driver-specific information.
	Status map[string]any `json:",omitempty"`
}

// Capabilities are a volume driver's answer to VolumeDriver.Capabilities.
type Capabilities struct {
	// Scope is ScopeLocal or ScopeGlobal.
	Scope string
}

// The request and response bodies of the VolumeDriver protocol, as Docker's
// engine sends and reads them. The "Err" field every response may carry is
// handled by discovery.Call.
type (
	createRequest struct {
		Name string
		Opts map[string]string
	}
	nameRequest struct {
		Name string
	}
	mountRequest struct {
		Name string
		ID   string
	}
	mountpointResponse struct {
		Mountpoint string
	}
	getResponse struct {
		Volume *Volume
	}
	listResponse struct {
		Volumes []Volume
	}
	capabilitiesResponse struct {
		Capabilities Capabilities
	}
)

// DefaultRetryWithin bounds the retries of a call that cannot reach its
// plugin, as moby's plugin client does (pkg/plugins, defaultTimeOut).
const DefaultRetryWithin = 30 * time.Second

// Retry is how a Client retries a call that could not reach its plugin
// (discovery.ErrUnreachable), with moby's backoff: it waits First, then
// twice as long after each attempt, and gives up when the next wait would
// end past Within. A plugin's own answer, an error included, is never
// retried. The zero Retry is moby's: 1 s doubling, within 30 s.
type Retry struct {
	// Within bounds the retrying (default DefaultRetryWithin); a negative
	// Within makes one attempt.
	Within time.Duration
	// First is the first wait (default 1 s).
	First time.Duration
}

// NoRetry makes one attempt.
var NoRetry = Retry{Within: -1}

// Client calls one Docker volume plugin. It holds no connection: every call
// opens and closes its own, so a Client needs no closing and may be used by
// several goroutines at once.
type Client struct {
	plugin discovery.Candidate
	retry  Retry
}

// NewClient returns a client for the volume plugin found as plugin, which
// retries as moby's does (the zero Retry).
func NewClient(plugin discovery.Candidate) *Client {
	return &Client{plugin: plugin}
}

// WithRetry returns a copy of c that retries unreachable calls as r says.
func (c *Client) WithRetry(r Retry) *Client {
	return &Client{plugin: c.plugin, retry: r}
}

// Plugin returns the plugin the client calls.
func (c *Client) Plugin() discovery.Candidate { return c.plugin }

// Create asks the plugin to create volume name with driver-specific opts
// (VolumeDriver.Create).
func (c *Client) Create(ctx context.Context, name string, opts map[string]string) error {
	return c.onVolume(ctx, "create", name, LongTimeout, "Create", createRequest{Name: name, Opts: opts}, nil)
}

// Remove asks the plugin to delete volume name (VolumeDriver.Remove).
func (c *Client) Remove(ctx context.Context, name string) error {
	return c.onVolume(ctx, "remove", name, ShortTimeout, "Remove", nameRequest{Name: name}, nil)
}

// Mount asks the plugin to mount volume name for the caller id, a unique
// id per mount (Docker uses the container's), and returns the host path
// where the volume is mounted (VolumeDriver.Mount).
func (c *Client) Mount(ctx context.Context, name, id string) (string, error) {
	var resp mountpointResponse
	err := c.onVolume(ctx, "mount", name, LongTimeout, "Mount", mountRequest{Name: name, ID: id}, &resp)
	return resp.Mountpoint, err
}

// Unmount tells the plugin that caller id no longer uses volume name
// (VolumeDriver.Unmount).
func (c *Client) Unmount(ctx context.Context, name, id string) error {
	return c.onVolume(ctx, "unmount", name, ShortTimeout, "Unmount", mountRequest{Name: name, ID: id}, nil)
}

// Path returns the host path of volume name, empty when it is not mounted
// (VolumeDriver.Path).
func (c *Client) Path(ctx context.Context, name string) (string, error) {
	var resp mountpointResponse
	err := c.onVolume(ctx, "get the path of", name, ShortTimeout, "Path", nameRequest{Name: name}, &resp)
	return resp.Mountpoint, err
}

// Get returns volume name (VolumeDriver.Get); ErrNoSuchVolume when the
// plugin answers without one.
func (c *Client) Get(ctx context.Context, name string) (Volume, error) {
	var resp getResponse
	if err := c.onVolume(ctx, "get", name, ShortTimeout, "Get", nameRequest{Name: name}, &resp); err != nil {
		return Volume{}, err
	}
	if resp.Volume == nil {
		return Volume{}, fmt.Errorf("%w: plugin %q has no volume %q", ErrNoSuchVolume, c.plugin.Name, name)
	}
	return *resp.Volume, nil
}

// List returns the plugin's volumes, in its order (VolumeDriver.List).
func (c *Client) List(ctx context.Context) ([]Volume, error) {
	var resp listResponse
	if err := c.call(ctx, ShortTimeout, "List", struct{}{}, &resp); err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	return resp.Volumes, nil
}

// Capabilities returns the plugin's capabilities (VolumeDriver.Capabilities).
// As in Docker, the call is optional: a plugin that does not implement it
// (answers 404) is local, and so is one that gives no scope. The scope is
// lower-cased; one other than local or global is ErrUnknownScope.
func (c *Client) Capabilities(ctx context.Context) (Capabilities, error) {
	var resp capabilitiesResponse
	err := c.call(ctx, ShortTimeout, "Capabilities", struct{}{}, &resp)
	switch {
	case errors.Is(err, discovery.ErrNotImplemented):
		return Capabilities{Scope: ScopeLocal}, nil
	case err != nil:
		return Capabilities{}, fmt.Errorf("get capabilities: %w", err)
	}
	scope := strings.ToLower(resp.Capabilities.Scope)
	switch scope {
	case "":
		scope = ScopeLocal
	case ScopeLocal, ScopeGlobal:
	default:
		return Capabilities{}, fmt.Errorf("%w: plugin %q gave %q", ErrUnknownScope, c.plugin.Name, resp.Capabilities.Scope)
	}
	return Capabilities{Scope: scope}, nil
}

// onVolume makes a call about volume name, which must not be empty; verb
// describes the call in errors.
func (c *Client) onVolume(ctx context.Context, verb, name string, timeout time.Duration, method string, req, resp any) error {
	if name == "" {
		return fmt.Errorf("%w: %s volume: volume name must not be empty", ErrInvalidArgument, verb)
	}
	if err := c.call(ctx, timeout, method, req, resp); err != nil {
		return fmt.Errorf("%s volume %q: %w", verb, name, err)
	}
	return nil
}

// call makes VolumeDriver.<method> within timeout, retrying while the
// plugin cannot be reached (see Retry).
func (c *Client) call(ctx context.Context, timeout time.Duration, method string, req, resp any) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	within := cmp.Or(c.retry.Within, DefaultRetryWithin)
	wait := cmp.Or(c.retry.First, time.Second)
	start := time.Now()
	for {
		err := discovery.Call(ctx, c.plugin, "VolumeDriver."+method, req, resp)
		if !errors.Is(err, discovery.ErrUnreachable) || time.Since(start)+wait >= within {
			return err
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return err
		case <-timer.C:
		}
		wait = min(2*wait, DefaultRetryWithin)
	}
}
