package etcdtest

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy in front of a Server: a node that dials etcd
// through it can be cut off from etcd (a partition: its connections are
// closed and new ones are closed at once) while etcd and the other nodes
// go on, and healed again. It stops with the test.
type Proxy struct {
	ln     net.Listener
	target string
	scheme string // of Endpoints: https in front of a TLS member

	mu    sync.Mutex
	cut   bool
	fresh bool // new connections are refused (RefuseNew)
	muted bool // what the target sends is dropped (Mute)
	// refused counts the connections closed as they came (Refused).
	refused int
	conns   map[net.Conn]bool
	wg      sync.WaitGroup
}

// Proxy starts a proxy to s on a free loopback port.
func (s *Server) Proxy(t testing.TB) *Proxy {
	t.Helper()
	p := NewProxy(t, s.client.Host)
	p.scheme = s.client.Scheme
	return p
}

// NewProxy starts a proxy to target (host:port) on a free loopback port,
// as a cut of any TCP link, such as a cluster member's port, needs.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("etcdtest: proxy: %v", err)
	}
	p := &Proxy{ln: ln, target: target, scheme: "http", conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Address is the proxy's host:port.
func (p *Proxy) Address() string { return p.ln.Addr().String() }

// Endpoints are the client URLs to dial through the proxy: https:// in
// front of a TLS member (its certificate names 127.0.0.1).
func (p *Proxy) Endpoints() []string { return []string{p.scheme + "://" + p.ln.Addr().String()} }

// Cut closes every connection through the proxy, and every new one as it
// comes, until Heal.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// RefuseNew closes every new connection as it comes, until Heal, and
// lets those already made go on: a client that dials again (a new one)
// cannot reach etcd, where the clients it had still do.
func (p *Proxy) RefuseNew() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fresh = true
}

// Refused is how many connections the proxy has closed as they came,
// while cut or refusing new ones: how often its clients tried again.
func (p *Proxy) Refused() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused
}

// Mute drops, until Heal, every byte the target sends through the proxy,
// and passes on what is sent to it: a cut on the way back, after which a
// request reaches etcd, and may be applied, but its answer never comes.
// Heal closes the connections muted, whose streams lost bytes.
func (p *Proxy) Mute() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.muted = true
}

// Heal lets connections through again; a muted connection is closed.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.muted {
		for c := range p.conns {
			_ = c.Close()
		}
	}
	p.cut, p.fresh, p.muted = false, false, false
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve pipes c to the target both ways until either side ends.
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	up, err := net.Dial("tcp", p.target)
	if err != nil || !p.track(c, up) {
		_ = c.Close()
		if up != nil {
			_ = up.Close()
		}
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, &muting{Conn: up, p: p})
	<-done
	p.untrack(c, up)
	<-done
}

// muting is the target's side of a connection, read as nothing while the
// proxy is muted.
type muting struct {
	net.Conn
	p *Proxy
}

func (m *muting) Read(b []byte) (int, error) {
	for {
		n, err := m.Conn.Read(b)
		m.p.mu.Lock()
		muted := m.p.muted
		m.p.mu.Unlock()
		if !muted || err != nil {
			return n, err
		}
	}
}

// track keeps c and up to be closed by Cut; false when cut already, or
// new connections are refused.
func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut || p.fresh {
		p.refused++
		return false
	}
	for _, c := range conns {
		p.conns[c] = true
	}
	return true
}

// untrack closes conns and forgets them.
func (p *Proxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

// close stops the proxy and waits for its goroutines.
func (p *Proxy) close() {
	if err := p.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return
	}
	p.Cut()
	p.wg.Wait()
}
