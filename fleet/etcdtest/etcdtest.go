// Package etcdtest runs an etcd server inside a test process (package
// embedded), on loopback ports in a temporary directory, so that the
// cluster tests need nothing installed. The server can be stopped and started again on the same data
// directory and ports, as an etcd restart.
package etcdtest

import (
	"net"
	"net/url"
	"testing"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/plugvisor/plugvisor/fleet/embedded"
)

// Server is one embedded etcd member.
type Server struct {
	t       testing.TB
	dir     string
	client  *url.URL
	peer    *url.URL
	etcd    *embed.Etcd
	stopped bool
}

// Start runs an etcd member for the test on two free loopback ports; it
// stops with the test.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, dir: t.TempDir(), client: freeURL(t), peer: freeURL(t)}
	s.start()
	t.Cleanup(s.Stop)
	return s
}

// Endpoints are the client URLs to dial.
func (s *Server) Endpoints() []string { return []string{s.client.String()} }

// Stop stops the member; its data stays for Restart.
func (s *Server) Stop() {
	if s.stopped {
		return
	}
	s.stopped = true
	s.etcd.Close()
}

// Restart starts the member again on the same data and ports.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

func (s *Server) start() {
	s.t.Helper()
	e, err := embedded.Start(embedded.Config{Dir: s.dir, Client: s.client, Peer: s.peer})
	if err != nil {
		s.t.Fatalf("etcdtest: %v", err)
	}
	s.etcd, s.stopped = e, false
}

// freeURL is an http URL on a loopback port that was free a moment ago.
func freeURL(t testing.TB) *url.URL {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("etcdtest: find a free port: %v", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	return &url.URL{Scheme: "http", Host: addr}
}
