package httpgate

import (
	"bytes"
	"errors"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// accepted is one result of the gate's accept loop.
type accepted struct {
	c   *gateConn
	err error
}

// Accept returns the next connection the gate let in.
func (g *Listener) Accept() (net.Conn, error) {
	select {
	case a := <-g.accepted:
		if a.err != nil {
			return nil, a.err
		}
		return a.c, nil
	case <-g.done:
		return nil, net.ErrClosed
	}
}

// acceptLoop accepts every connection as soon as it comes, so that the
// kernel's backlog never holds a client behind others. While the listener
// is crowded (no room without closing another connection), a new one waits
// on probation, without the server's goroutine and buffers, until it has
// sent, whole, what its server reads first (see waitReady): then it goes
// in; or until HeaderTimeout passes: then it is closed. Probation holds
// at most 16×MaxConns connections (a file descriptor and a parked
// goroutine each); a new one closes the oldest beyond that.
func (g *Listener) acceptLoop() {
	for {
		nc, err := g.inner.Accept()
		if errors.Is(err, net.ErrClosed) {
			_ = g.Close()
			return
		}
		if err != nil {
			g.deliver(accepted{err: err})
			continue
		}
		c := &gateConn{Conn: nc, g: g}
		if tcp, ok := nc.RemoteAddr().(*net.TCPAddr); ok && g.cfg.MaxConnsPerPeer > 0 {
			c.peer = tcp.IP.String()
		}
		if g.cfg.HandshakeTimeout > 0 {
			c.handshakeDeadline = time.Now().Add(g.cfg.HandshakeTimeout)
			_ = nc.SetDeadline(c.handshakeDeadline)
		}
		if g.crowded(c.peer) {
			g.probation(c)
			continue
		}
		g.letIn(c)
	}
}

// letIn makes room for c and hands it to Accept.
func (g *Listener) letIn(c *gateConn) {
	if !g.place(c) {
		_ = c.Conn.Close()
		return
	}
	g.deliver(accepted{c: c})
}

func (g *Listener) deliver(a accepted) {
	select {
	case g.accepted <- a:
	case <-g.done:
		if a.c != nil {
			_ = a.c.Close()
		}
	}
}

// crowded says whether a new connection from peer finds no room without
// closing another.
func (g *Listener) crowded(peer string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, full := g.victim(peer, time.Time{})
	return full
}

// probation waits, on a goroutine of its own, for c to be ready, then
// lets it in; it closes c when the wait ends otherwise.
func (g *Listener) probation(c *gateConn) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		_ = c.Conn.Close()
		return
	}
	if g.waiting.Len() >= probationPerConn*g.cfg.MaxConns {
		oldest := g.waiting.Remove(g.waiting.Front()).(*gateConn)
		oldest.elem = nil
		_ = oldest.Conn.Close()
	}
	c.elem = g.waiting.PushBack(c) // until it is let in or closed
	g.mu.Unlock()
	go func() {
		ok := waitReady(c.Conn, g.cfg.HandshakeTimeout > 0, g.cfg.HeaderTimeout)
		g.mu.Lock()
		mine := c.elem != nil && !g.closed
		if c.elem != nil {
			g.waiting.Remove(c.elem)
			c.elem = nil
		}
		g.mu.Unlock()
		if ok && mine {
			_ = c.Conn.SetReadDeadline(c.handshakeDeadline)
			g.letIn(c)
			return
		}
		_ = c.Conn.Close()
	}()
}

// probationPerConn is how many connections per MaxConns wait on
// probation at most.
const probationPerConn = 16

// peekBufs are the scratch space of waitReady.
var peekBufs = sync.Pool{New: func() any { b := make([]byte, peekSize); return &b }}

// peekSize bounds what the gate looks at of a new connection while its
// listener is crowded.
const peekSize = 8 << 10

// waitReady waits up to wait for nc to have sent, whole, what its server
// reads first: on TLS its first handshake record (the ClientHello), else a
// whole request (headers, and the body they announce). It looks without
// reading; what it cannot tell counts as not ready.
func waitReady(nc net.Conn, isTLS bool, wait time.Duration) bool {
	_ = nc.SetReadDeadline(time.Now().Add(wait))
	whole := false
	_ = peek(nc, func(fd int) bool {
		var done bool
		whole, done = peekWhole(fd, isTLS)
		return whole || done
	})
	return whole
}

// peek calls f with nc's descriptor until f returns true, waiting for
// nc to be readable in between.
func peek(nc net.Conn, f func(fd int) bool) error {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return errors.ErrUnsupported
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	return raw.Read(func(fd uintptr) bool { return f(int(fd)) })
}

// peekWhole looks at what fd holds without reading it: whole when it is
// ready (see waitReady), or holds peekSize bytes (a client that sends that
// much at once is no trickle); done when waiting is no use (the client hung
// up).
func peekWhole(fd int, isTLS bool) (whole, done bool) {
	bp := peekBufs.Get().(*[]byte)
	defer peekBufs.Put(bp)
	buf := *bp
	n, _, err := syscall.Recvfrom(fd, buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	switch {
	case errors.Is(err, syscall.EAGAIN):
		return false, false
	case err != nil || n == 0:
		return false, true
	case n == len(buf):
		return true, true
	case isTLS:
		return wholeTLSRecord(buf[:n]), false
	}
	return wholeRequest(buf[:n]), false
}

// wholeTLSRecord says whether b begins with a whole TLS handshake record.
func wholeTLSRecord(b []byte) bool {
	const handshake = 0x16
	return len(b) >= 5 && b[0] == handshake && len(b) >= 5+(int(b[3])<<8|int(b[4]))
}

// wholeRequest says whether b begins with a whole HTTP/1 request: its
// headers, and as many body bytes as its Content-Length says. A chunked
// body cannot be told whole.
func wholeRequest(b []byte) bool {
	end := bytes.Index(b, []byte("\r\n\r\n"))
	if end < 0 {
		return false
	}
	body := len(b) - end - 4
	lines := bytes.Split(b[:end], []byte("\r\n"))
	for _, line := range lines[1:] {
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return false
		}
		switch string(bytes.ToLower(bytes.TrimSpace(name))) {
		case "transfer-encoding":
			return false
		case "content-length":
			n, err := strconv.Atoi(string(bytes.TrimSpace(value)))
			if err != nil || n > body {
				return false
			}
		}
	}
	return true
}
