package volumes

import (
	"context"
	"sync"

	"github.com/plugvisor/plugvisor/csi"
)

// connections keeps one connection per plugin socket, shared by the
// manager's jobs: a connection dialled per job cost a connection set-up on
// both sides and a wait for it to be ready in every operation. A job holds
// the connections it uses until it ends. One that ended with an error
// drops them: the next job dials afresh, rather than waiting out gRPC's
// reconnection backoff on a plugin that is back, and a dropped connection
// is closed once its last holder lets go, never under another job's RPC.
type connections struct {
	mu    sync.Mutex
	conns map[string]*sharedConn
}

// sharedConn is one socket's connection and the jobs that hold it.
type sharedConn struct {
	socket  string
	client  *csi.Client
	holders int
	dropped bool
}

// hold returns socket's connection, dialling it with dial when there is
// none, and counts the caller as a holder until release.
func (c *connections) hold(ctx context.Context, socket string, dial func(context.Context) (*csi.Client, error)) (*sharedConn, error) {
	if sc := c.held(socket); sc != nil {
		return sc, nil
	}
	client, err := dial(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if sc := c.conns[socket]; sc != nil {
		// Another job dialled meanwhile: keep one connection.
		_ = client.Close()
		sc.holders++
		return sc, nil
	}
	if c.conns == nil {
		c.conns = map[string]*sharedConn{}
	}
	sc := &sharedConn{socket: socket, client: client, holders: 1}
	c.conns[socket] = sc
	return sc, nil
}

// held counts the caller as a holder of socket's connection, if there is one.
func (c *connections) held(socket string) *sharedConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	sc := c.conns[socket]
	if sc != nil {
		sc.holders++
	}
	return sc
}

// release lets go of sc; drop says the holder's operation failed, so that
// the next one dials afresh.
func (c *connections) release(sc *sharedConn, drop bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sc.holders--
	if drop && !sc.dropped {
		sc.dropped = true
		delete(c.conns, sc.socket)
	}
	if sc.dropped && sc.holders == 0 {
		_ = sc.client.Close()
	}
}

// close closes every connection; no job may hold one.
func (c *connections) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, sc := range c.conns {
		_ = sc.client.Close()
	}
	c.conns = nil
}
