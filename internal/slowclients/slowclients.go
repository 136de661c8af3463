// Package slowclients holds slow clients against a server in tests: each
// connects, sends a little, and then nothing, and connects again as soon
// as the server closes it.
package slowclients

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Crowd is a running set of slow clients.
type Crowd struct {
	// Opened counts the connections made; Closed those the server closed.
	Opened, Closed atomic.Int64

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Hold starts n clients, each of which connects with dial, sends send,
// reads until the server closes the connection, and connects again, until
// Stop.
func Hold(n int, dial func(context.Context) (net.Conn, error), send string) *Crowd {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Crowd{cancel: cancel}
	for range n {
		c.wg.Go(func() {
			for ctx.Err() == nil {
				conn, err := dial(ctx)
				if err != nil {
					time.Sleep(10 * time.Millisecond) // out of ports or files: let some close
					continue
				}
				c.Opened.Add(1)
				halt := context.AfterFunc(ctx, func() { conn.Close() })
				_, _ = io.WriteString(conn, send)
				_, _ = io.Copy(io.Discard, conn)
				if halt() {
					c.Closed.Add(1) // by the server, not by Stop
				}
				conn.Close()
			}
		})
	}
	return c
}

// Stop closes every client's connection and waits for them to end.
func (c *Crowd) Stop() {
	c.cancel()
	c.wg.Wait()
}
