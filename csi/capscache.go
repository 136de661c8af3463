package csi

import (
	"context"
	"errors"
	"sync"

	"google.golang.org/grpc/connectivity"
)

// capsCache holds a plugin instance's answers to NodeGetCapabilities and
// ControllerGetCapabilities for as long as the client's connection stays
// ready: the instance behind a connection does not change its
// capabilities, and a plugin that restarts on its socket drops the
// connection first. The volume manager asks them for every mount, and
// they would cost a round trip each.
type capsCache struct {
	mu sync.Mutex
	// epoch counts the times the connection left the ready state; an
	// answer asked in an earlier epoch is not kept.
	epoch uint64
	node  *NodeCapabilities
	ctrl  *ControllerCapabilities
	// ctrlErr is ErrUnimplemented's answer, kept as an answer: the
	// instance has no controller service.
	ctrlErr error
}

// forget drops the answers and starts a new epoch.
func (c *capsCache) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	c.node, c.ctrl, c.ctrlErr = nil, nil, nil
}

// watch forgets the capabilities each time the connection leaves the
// ready state (a transport that broke, a plugin that restarted) until ctx
// ends or the connection shuts down.
func (c *Client) watch(ctx context.Context) {
	defer close(c.watched)
	state := c.conn.GetState()
	for c.conn.WaitForStateChange(ctx, state) {
		state = c.conn.GetState()
		if state != connectivity.Ready {
			c.caps.forget()
		}
		if state == connectivity.Shutdown {
			return
		}
	}
}

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
