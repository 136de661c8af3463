// Package httpgate admits an HTTP server's connections so that clients
// that have proved nothing (no headers, token or body yet) cannot keep
// out those that have: New wraps a net.Listener in a gate with per-peer
// and per-listener caps, its Handler admits each authenticated request
// once its body is in (at a minimum rate), and OpenStream caps the
// listener's long-lived streams.
//
//	g := httpgate.New(l, httpgate.Config{MaxConns: 256, ...})
//	srv := &http.Server{Handler: g.Handler(authenticated, mux),
//		ConnContext: g.ConnContext, ConnState: g.ConnState}
//	srv.Serve(g) // or tls.NewListener(g, g.TLSConfig(base))
package httpgate

import (
	"container/list"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Listener, a gate, caps one listener's connections without ever letting
// clients that have proved nothing take the last of them. It sorts its
// connections by what they have proved:
//   - unproven: connected, but the request being read has not yet shown
//     its headers, a valid token (where the listener wants one) and all of
//     its body; a TLS handshake is part of this;
//   - idle: kept alive between requests, after an admitted one;
//   - admitted: serving an authenticated request whose body has arrived.
//
// Unproven connections may hold at most MaxConns-ReservedConns slots, and
// at most MaxConnsPerPeer from one TCP peer (IP). The gate accepts every connection at
// once; while there is no room, a new one waits aside until it has sent
// its request (accept.go), then closes another to make room: one whose
// server has waited on it, in one read, for at least stalled (a client
// whose request is there is never waited on); of its peer's, then of the
// listener's, the oldest; while any has sent nothing at all, only those.
// With every slot taken, the oldest idle one goes first. When none may be
// closed yet, it waits for one; it waits for good only when every slot
// serves an admitted request, which is never closed.
//
// The gate is the only owner of this bookkeeping; every method takes mu.
type Listener struct {
	inner net.Listener
	cfg   Config

	mu       sync.Mutex
	room     *sync.Cond
	unproven pool
	peers    map[string]*pool
	idle     list.List
	admitted int
	streams  int
	closed   bool
	waiting  list.List // connections on probation (see accept.go), oldest first

	accepted chan accepted // from acceptLoop and probation to Accept
	done     chan struct{} // closed by Close
}

// Config is a gate's caps, all of them given (the caller applies its
// defaults and checks them).
type Config struct {
	// MaxConns caps the listener's connections; ReservedConns of them are
	// kept for requests that proved themselves; MaxConnsPerPeer caps one
	// TCP peer's unproven ones; MaxStreams caps the event streams
	// (OpenStream).
	MaxConns, ReservedConns, MaxConnsPerPeer, MaxStreams int
	// HandshakeTimeout is the TLS handshake's deadline from accept; 0 on
	// a listener without TLS.
	HandshakeTimeout time.Duration
	// HeaderTimeout is the longest a new connection waits on probation,
	// and the grace a request body gets before MinBodyRate applies.
	HeaderTimeout time.Duration
	// ReadTimeout bounds reading a request body, from the handler's start.
	ReadTimeout time.Duration
	// MinBodyRate is the slowest a request body may arrive, in bytes a
	// second, after HeaderTimeout.
	MinBodyRate int
}

// New starts a gate on inner; Close stops it. Serve HTTP on it with
// Handler, ConnContext and ConnState in the http.Server, and on TLS wrap
// it with tls.NewListener(g, g.TLSConfig(base)).
func New(inner net.Listener, cfg Config) *Listener {
	g := &Listener{inner: inner, cfg: cfg, peers: map[string]*pool{},
		accepted: make(chan accepted), done: make(chan struct{})}
	g.room = sync.NewCond(&g.mu)
	go g.acceptLoop()
	return g
}

// pool holds unproven connections oldest first, those that have sent
// nothing apart from the others.
type pool struct{ silent, heard list.List }

func (p *pool) len() int { return p.silent.Len() + p.heard.Len() }

func (p *pool) push(c *gateConn) *list.Element {
	if c.heard {
		return p.heard.PushBack(c)
	}
	return p.silent.PushBack(c)
}

func (p *pool) remove(e *list.Element) {
	p.silent.Remove(e)
	p.heard.Remove(e)
}

// stalled is the connection to close first, of those whose server has
// waited on them for at least stalled: while any connection of the pool
// has sent nothing, only those are, the oldest first; else the oldest of
// the others. Nil when none may be closed yet.
func (p *pool) stalled(now time.Time) *gateConn {
	l := &p.silent
	if l.Len() == 0 {
		l = &p.heard
	}
	for e := l.Front(); e != nil; e = e.Next() {
		if c := e.Value.(*gateConn); c.waiting(now) {
			return c
		}
	}
	return nil
}

type connClass int

const (
	classUnproven connClass = iota
	classIdle
	classAdmitted
	classGone // closed, by its server or by the gate
)

// gateConn is one connection of a gate.
type gateConn struct {
	net.Conn
	g    *Listener
	peer string // the TCP peer's IP; "" on a unix socket

	// Guarded by g.mu.
	class          connClass
	heard          bool          // it has sent a byte
	admittedNow    bool          // its current request was admitted
	elem, peerElem *list.Element // in g.unproven or g.idle; in its peer's pool

	handshakeDeadline time.Time // zero without TLS; set before the server has it
	heardOnce         atomic.Bool
	handshook         atomic.Bool
	readSince         atomic.Int64 // when the read under way began (UnixNano), or 0

}

// stalled is how long a connection's server must have waited on it, in
// one read, before the gate may close it to make room: a client whose
// request is already there is read and admitted long before.
const stalled = 10 * time.Millisecond

// place makes room for c, closing others as the gate's rules say, or
// waits for a connection that may be closed, or for an admitted one to
// end; false when the gate closed.
func (g *Listener) place(c *gateConn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for !g.closed {
		v, full := g.victim(c.peer, time.Now())
		switch {
		case v != nil:
			g.detach(v)
			_ = v.Conn.Close()
		case !full:
			g.attach(c, classUnproven)
			return true
		default:
			// Woken when a slot frees, or when a connection has waited
			// long enough to be closed.
			wake := time.AfterFunc(stalled, g.room.Broadcast)
			g.room.Wait()
			wake.Stop()
		}
	}
	return false
}

// victim is the connection to close to make room for a new one from
// peer, if any may be; full says whether there is no room without one.
func (g *Listener) victim(peer string, now time.Time) (*gateConn, bool) {
	if p := g.peers[peer]; p != nil && p.len() >= g.cfg.MaxConnsPerPeer {
		return p.stalled(now), true
	}
	if g.unproven.len() >= g.cfg.MaxConns-g.cfg.ReservedConns {
		return g.unproven.stalled(now), true
	}
	if g.total() < g.cfg.MaxConns {
		return nil, false
	}
	if e := g.idle.Front(); e != nil {
		return e.Value.(*gateConn), true
	}
	return g.unproven.stalled(now), true
}

func (g *Listener) total() int { return g.unproven.len() + g.idle.Len() + g.admitted }

// attach counts c in class.
func (g *Listener) attach(c *gateConn, class connClass) {
	c.class = class
	switch class {
	case classUnproven:
		c.elem = g.unproven.push(c)
		if c.peer != "" {
			p := g.peers[c.peer]
			if p == nil {
				p = &pool{}
				g.peers[c.peer] = p
			}
			c.peerElem = p.push(c)
		}
	case classIdle:
		c.elem = g.idle.PushBack(c)
	case classAdmitted:
		g.admitted++
	}
}

// detach stops counting c: it is gone until attached again.
func (g *Listener) detach(c *gateConn) {
	switch c.class {
	case classUnproven:
		g.unproven.remove(c.elem)
		if p := g.peers[c.peer]; p != nil {
			p.remove(c.peerElem)
			if p.len() == 0 {
				delete(g.peers, c.peer)
			}
		}
	case classIdle:
		g.idle.Remove(c.elem)
	case classAdmitted:
		g.admitted--
	}
	c.class, c.elem, c.peerElem = classGone, nil, nil
	g.room.Signal()
}

// move puts c, unless it is gone, in class.
func (g *Listener) move(c *gateConn, class connClass) {
	if c.class == classGone || c.class == class {
		return
	}
	g.detach(c)
	g.attach(c, class)
}

// heard moves c among those that have sent something.
func (g *Listener) heard(c *gateConn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	c.heard = true
	if c.class == classUnproven {
		g.detach(c)
		g.attach(c, classUnproven)
	}
}

// admit counts c's current request as admitted.
func (g *Listener) admit(c *gateConn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	c.admittedNow = true
	g.move(c, classAdmitted)
}

// ConnState, the http.Server's hook, follows the server's view of each connection: a request
// being served is unproven until admitted; between requests a connection
// is idle if its last request was admitted, else still unproven.
func (g *Listener) ConnState(nc net.Conn, state http.ConnState) {
	c := unwrapConn(nc)
	if c == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch state {
	case http.StateActive:
		c.admittedNow = false
		g.move(c, classUnproven)
	case http.StateIdle:
		if c.admittedNow {
			g.move(c, classIdle)
		} else {
			g.move(c, classUnproven)
		}
	case http.StateHijacked, http.StateClosed:
		g.move(c, classGone)
	}
}

// unwrapConn is the gate's connection under nc, which may be TLS.
func unwrapConn(nc net.Conn) *gateConn {
	if t, ok := nc.(*tls.Conn); ok {
		nc = t.NetConn()
	}
	c, _ := nc.(*gateConn)
	return c
}

// OpenStream takes one of the listener's event stream slots; release
// gives it back. False when all Config.MaxStreams are taken.
func (g *Listener) OpenStream() (release func(), ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.streams >= g.cfg.MaxStreams {
		return nil, false
	}
	g.streams++
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.streams--
		})
	}, true
}

// Close stops accepting and wakes an Accept waiting for room.
func (g *Listener) Close() error {
	g.mu.Lock()
	if !g.closed {
		close(g.done)
	}
	g.closed = true
	g.room.Broadcast()
	for e := g.waiting.Front(); e != nil; e = e.Next() {
		_ = e.Value.(*gateConn).Conn.Close()
	}
	g.mu.Unlock()
	return g.inner.Close()
}

// Addr is the listener's address.
func (g *Listener) Addr() net.Addr { return g.inner.Addr() }

// waiting says whether c's server has been waiting on it, in one read,
// for at least stalled.
func (c *gateConn) waiting(now time.Time) bool {
	since := c.readSince.Load()
	return since != 0 && now.UnixNano()-since >= int64(stalled)
}

// Read notes how long the server waits on the client, and the first
// byte the client sends.
func (c *gateConn) Read(b []byte) (int, error) {
	c.readSince.Store(time.Now().UnixNano())
	n, err := c.Conn.Read(b)
	c.readSince.Store(0)
	if n > 0 && !c.heardOnce.Swap(true) {
		c.g.heard(c)
	}
	return n, err
}

// Close gives the connection's slot back.
func (c *gateConn) Close() error {
	c.g.mu.Lock()
	c.g.move(c, classGone)
	c.g.mu.Unlock()
	return c.Conn.Close()
}

// SetDeadline, SetReadDeadline and SetWriteDeadline keep a TLS
// connection within its handshake deadline until the handshake is done.
func (c *gateConn) SetDeadline(t time.Time) error { return c.Conn.SetDeadline(c.clamp(t)) }

func (c *gateConn) SetReadDeadline(t time.Time) error { return c.Conn.SetReadDeadline(c.clamp(t)) }

func (c *gateConn) SetWriteDeadline(t time.Time) error { return c.Conn.SetWriteDeadline(c.clamp(t)) }

func (c *gateConn) clamp(t time.Time) time.Time {
	if c.handshakeDeadline.IsZero() || c.handshook.Load() {
		return t
	}
	if t.IsZero() || t.After(c.handshakeDeadline) {
		return c.handshakeDeadline
	}
	return t
}

// TLSConfig returns base with a configuration per connection that tells
// the gate's connection when its handshake is done, which lifts its
// handshake deadline.
func (g *Listener) TLSConfig(base *tls.Config) *tls.Config {
	cfg := base.Clone()
	cfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		c, ok := hello.Conn.(*gateConn)
		if !ok {
			return nil, nil
		}
		per := base.Clone()
		per.VerifyConnection = func(tls.ConnectionState) error {
			c.handshook.Store(true)
			return nil
		}
		return per, nil
	}
	return cfg
}

type gateConnKey struct{}

// ConnContext, the http.Server's hook, puts the connection in every
// request's context, for Handler.
func (g *Listener) ConnContext(ctx context.Context, nc net.Conn) context.Context {
	return context.WithValue(ctx, gateConnKey{}, unwrapConn(nc))
}
