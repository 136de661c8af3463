package volumes

import (
	"context"

	"github.com/plugvisor/plugvisor/csi"
)

// Settled is settled, for the tests of package volumes_test.
var Settled = settled

// Connections is the manager's shared plugin connections, for their tests.
type Connections = connections

// Hold holds socket's connection, dialling it with csi.Dial if there is none.
func (c *Connections) Hold(ctx context.Context, socket string) (*SharedConn, error) {
	return c.hold(ctx, socket, func(ctx context.Context) (*csi.Client, error) { return csi.Dial(ctx, socket, csi.Options{}) })
}

// SharedConn is one socket's shared connection.
type SharedConn = sharedConn

// Client is sc's client.
func (sc *SharedConn) Client() *csi.Client { return sc.client }

// Release lets go of sc, dropping it when drop is set.
func (c *Connections) Release(sc *SharedConn, drop bool) { c.release(sc, drop) }

// Close closes every connection.
func (c *Connections) Close() { c.close() }
