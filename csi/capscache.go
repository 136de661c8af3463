package csi

import (
	"context"
	"errors"
	"sync"

	"google.golang.org/grpc/stats"
)

// capsCache holds a plugin instance's answers to NodeGetCapabilities,
// ControllerGetCapabilities and GetPluginInfo for as long as one transport
// of the client's connection stays up: the instance behind a transport
// does not change its capabilities or its name, and a plugin that
// restarts on its socket (or another that takes the socket) is reached
// through a new transport. The volume manager asks them for every mount
// and every step of the way out, and they would cost a round trip each.
//
// It is the connection's stats handler: gRPC calls HandleConn when a
// transport starts (before any RPC is sent on it) and when it ends, on
// the transport's own goroutine, and each call forgets the answers, so
// none outlives the transport it was asked on.
type capsCache struct {
	mu sync.Mutex
	// epoch counts the transports started and ended; an answer asked in
	// an earlier epoch is not kept.
	epoch uint64
	node  *NodeCapabilities
	ctrl  *ControllerCapabilities
	info  *PluginInfo
	// ctrlErr is ErrUnimplemented's answer, kept as an answer: the
	// instance has no controller service.
	ctrlErr error
}

// forget drops the answers and starts a new epoch.
func (c *capsCache) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	c.node, c.ctrl, c.ctrlErr, c.info = nil, nil, nil, nil
}

// HandleConn forgets the answers at each transport's start and end
// (stats.ConnBegin, stats.ConnEnd).
func (c *capsCache) HandleConn(context.Context, stats.ConnStats) { c.forget() }

// TagConn implements stats.Handler.
func (c *capsCache) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

// TagRPC implements stats.Handler.
func (c *capsCache) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

// HandleRPC implements stats.Handler.
func (c *capsCache) HandleRPC(context.Context, stats.RPCStats) {}

// NodeCapabilitiesCached is NodeGetCapabilities, answered from the
// client's cache once the plugin instance has answered it on the current
// connection (see capsCache).
func (c *Client) NodeCapabilitiesCached(ctx context.Context) (NodeCapabilities, error) {
	c.caps.mu.Lock()
	cached, epoch := c.caps.node, c.caps.epoch
	c.caps.mu.Unlock()
	if cached != nil {
		return *cached, nil
	}
	caps, err := c.NodeGetCapabilities(ctx)
	if err == nil {
		c.caps.mu.Lock()
		if c.caps.epoch == epoch {
			c.caps.node = &caps
		}
		c.caps.mu.Unlock()
	}
	return caps, err
}

// ControllerCapabilitiesCached is ControllerGetCapabilities, answered
// from the client's cache as NodeCapabilitiesCached is; an instance
// without a controller service (ErrUnimplemented) is remembered too.
func (c *Client) ControllerCapabilitiesCached(ctx context.Context) (ControllerCapabilities, error) {
	c.caps.mu.Lock()
	cached, cachedErr, epoch := c.caps.ctrl, c.caps.ctrlErr, c.caps.epoch
	c.caps.mu.Unlock()
	switch {
	case cached != nil:
		return *cached, nil
	case cachedErr != nil:
		return ControllerCapabilities{}, cachedErr
	}
	caps, err := c.ControllerGetCapabilities(ctx)
	if err == nil || errors.Is(err, ErrUnimplemented) {
		c.caps.mu.Lock()
		if c.caps.epoch == epoch {
			if err == nil {
				c.caps.ctrl = &caps
			} else {
				c.caps.ctrlErr = err
			}
		}
		c.caps.mu.Unlock()
	}
	return caps, err
}

// PluginInfoCached is GetPluginInfo, answered from the client's cache
// once the plugin instance has answered it on the current connection (see
// capsCache): a plugin that another takes the socket of is asked again.
func (c *Client) PluginInfoCached(ctx context.Context) (PluginInfo, error) {
	c.caps.mu.Lock()
	cached, epoch := c.caps.info, c.caps.epoch
	c.caps.mu.Unlock()
	if cached != nil {
		return *cached, nil
	}
	info, err := c.GetPluginInfo(ctx)
	if err == nil {
		c.caps.mu.Lock()
		if c.caps.epoch == epoch {
			c.caps.info = &info
		}
		c.caps.mu.Unlock()
	}
	return info, err
}
