// Package etcdtest runs an etcd server for a test (package embedded), on
// loopback ports in a temporary directory, so that the cluster tests need
// nothing installed: inside the test process, or in a child process where
// the test process starts a protoactor remote. The server can be stopped
// and started again on the same data directory and ports, as an etcd
// restart. StartTLS runs it with client and peer TLS and client
// certificates, as plugvisor etcd does by default.
package etcdtest

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	etcdsnapshot "go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/plugvisor/plugvisor/fleet/embedded"
	"github.com/plugvisor/plugvisor/internal/pki"
)

// Server is one embedded etcd member.
type Server struct {
	t       testing.TB
	dir     string
	client  *url.URL
	peer    *url.URL
	etcd    *embed.Etcd
	stopped bool
	// pki, for a TLS member, is the directory of its CA, its certificate
	// (etcd.pem) and a client's (cli.pem), with their keys.
	pki string

	// child runs the member when it runs in a child process; closing its
	// stdin stops it.
	child *exec.Cmd
	stdin io.WriteCloser
}

// childEnv tells a test binary started by StartProcess which member to
// run: "<dir> <client URL> <peer URL>", and for TLS " <pki dir>".
const childEnv = "PLUGVISOR_ETCDTEST_CHILD"

// StartProcess runs an etcd member for the test in a child process: the
// test binary again, whose TestMain calls RunIfChild first. Tests whose
// process starts a protoactor remote need it: the remote sets gRPC's
// global logger, which an etcd in the same process reads. It stops with
// the test.
func StartProcess(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, dir: t.TempDir(), client: freeURL(t), peer: freeURL(t), child: &exec.Cmd{}}
	s.start()
	t.Cleanup(s.Stop)
	return s
}

// RunIfChild, in a test binary that StartProcess started, runs the member
// it asks for until its stdin closes, then exits; elsewhere it returns at
// once. Call it first in the TestMain of tests that use StartProcess.
func RunIfChild() {
	spec := strings.Fields(os.Getenv(childEnv))
	if len(spec) == 0 {
		return
	}
	os.Exit(runChild(spec))
}

func runChild(spec []string) int {
	if len(spec) != 3 && len(spec) != 4 {
		fmt.Fprintf(os.Stderr, "etcdtest: %s is %q: want <dir> <client URL> <peer URL> [<pki dir>]\n", childEnv, strings.Join(spec, " "))
		return 2
	}
	client, err := url.Parse(spec[1])
	if err == nil {
		var peer *url.URL
		if peer, err = url.Parse(spec[2]); err == nil {
			var e *embed.Etcd
			cfg := embedded.Config{Dir: spec[0], Client: client, Peer: peer}
			if len(spec) == 4 {
				cfg.TLS = memberTLS(spec[3])
			}
			if e, err = embedded.Start(cfg); err == nil {
				fmt.Println("ready")
				_, _ = io.Copy(io.Discard, os.Stdin)
				e.Close()
				return 0
			}
		}
	}
	fmt.Fprintf(os.Stderr, "etcdtest: %v\n", err)
	return 1
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

// StartTLS runs an etcd member for the test as Start does, with TLS on
// its client and peer URLs (https://), requiring a client certificate of
// its own CA: ClientTLS is a client's TLS, Files its files. It stops with
// the test.
func StartTLS(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, dir: t.TempDir(), client: freeURL(t), peer: freeURL(t), pki: newPKI(t)}
	s.client.Scheme, s.peer.Scheme = "https", "https"
	s.start()
	t.Cleanup(s.Stop)
	return s
}

// StartProcessTLS runs an etcd member for the test in a child process, as
// StartProcess does, with TLS as StartTLS.
func StartProcessTLS(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, dir: t.TempDir(), client: freeURL(t), peer: freeURL(t), pki: newPKI(t), child: &exec.Cmd{}}
	s.client.Scheme, s.peer.Scheme = "https", "https"
	s.start()
	t.Cleanup(s.Stop)
	return s
}

// Endpoints are the client URLs to dial.
func (s *Server) Endpoints() []string { return []string{s.client.String()} }

// Files are a client's TLS files: the CA that signs the member's and the
// client's certificates, the client's certificate (client use only, named
// "cli") and its key.
type Files struct{ CA, Cert, Key string }

// Files are the TLS files of a client of a TLS member; empty for a plain one.
func (s *Server) Files() Files {
	if s.pki == "" {
		return Files{}
	}
	return Files{CA: filepath.Join(s.pki, "ca.pem"), Cert: filepath.Join(s.pki, "cli.pem"), Key: filepath.Join(s.pki, "cli-key.pem")}
}

// ClientTLS is a new TLS config of a client of a TLS member: its CA as the
// only root, and a client certificate it signed. It is nil for a plain
// member.
func (s *Server) ClientTLS() *tls.Config {
	s.t.Helper()
	if s.pki == "" {
		return nil
	}
	f := s.Files()
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		s.t.Fatalf("etcdtest: %v", err)
	}
	pem, err := os.ReadFile(f.CA)
	if err != nil {
		s.t.Fatalf("etcdtest: %v", err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	return &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
}

// newPKI writes a new CA, the member's certificate and a client's into a
// temporary directory, as plugvisor tls does.
func newPKI(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()
	ca, err := pki.NewAuthority(24*time.Hour, now)
	if err == nil {
		_, _, err = pki.Write(dir, "ca", ca.Pair())
	}
	for _, r := range []pki.Request{{Role: pki.Etcd, Lifetime: time.Hour}, {Role: pki.CLI, Lifetime: time.Hour}} {
		var p *pki.Pair
		if err == nil {
			p, err = ca.Issue(r, now)
		}
		if err == nil {
			_, _, err = pki.Write(dir, r.Name(), p)
		}
	}
	if err != nil {
		t.Fatalf("etcdtest: certificates: %v", err)
	}
	return dir
}

// memberTLS is the member's TLS from the files newPKI wrote into dir.
func memberTLS(dir string) *embedded.TLS {
	return &embedded.TLS{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "etcd.pem"), Key: filepath.Join(dir, "etcd-key.pem")}
}

// config is the member's embedded config.
func (s *Server) config() embedded.Config {
	cfg := embedded.Config{Dir: s.dir, Client: s.client, Peer: s.peer}
	if s.pki != "" {
		cfg.TLS = memberTLS(s.pki)
	}
	return cfg
}

// Stop stops the member; its data stays for Restart.
func (s *Server) Stop() {
	if s.stopped {
		return
	}
	s.stopped = true
	if s.child != nil {
		_ = s.stdin.Close()
		if err := s.child.Wait(); err != nil {
			s.t.Errorf("etcdtest: the etcd child process: %v", err)
		}
		return
	}
	s.etcd.Close()
}

// RestoreFrom stops the member and starts it again on the same ports from
// a new data directory restored from snapshot, as an operator restores
// etcd under running clients: with bump, as plugvisor's restore does it
// (the revision moved far past the snapshot's and marked compacted), else
// as a plain etcdutl snapshot restore does (the revision goes back to the
// snapshot's).
func (s *Server) RestoreFrom(snapshot string, bump bool) {
	s.t.Helper()
	s.Stop()
	dir := s.t.TempDir() + "/restored"
	var err error
	if bump {
		err = embedded.Restore(snapshot, dir, s.peer)
	} else {
		err = etcdsnapshot.NewV3(zap.NewNop()).Restore(etcdsnapshot.RestoreConfig{
			SnapshotPath: snapshot, Name: embedded.MemberName, OutputDataDir: dir,
			PeerURLs: []string{s.peer.String()}, InitialCluster: fmt.Sprintf("%s=%s", embedded.MemberName, s.peer),
			InitialClusterToken: "etcd-cluster",
		})
	}
	if err != nil {
		s.t.Fatalf("etcdtest: restore: %v", err)
	}
	s.dir = dir
	s.start()
}

// Restart starts the member again on the same data and ports.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

func (s *Server) start() {
	s.t.Helper()
	if s.child != nil {
		s.startChild()
		return
	}
	e, err := embedded.Start(s.config())
	if err != nil {
		s.t.Fatalf("etcdtest: %v", err)
	}
	s.etcd, s.stopped = e, false
}

// startChild starts the member in a child process and waits until it
// serves.
func (s *Server) startChild() {
	s.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	spec := fmt.Sprintf("%s %s %s", s.dir, s.client, s.peer)
	if s.pki != "" {
		spec += " " + s.pki
	}
	cmd.Env = append(os.Environ(), childEnv+"="+spec)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		s.t.Fatalf("etcdtest: %v", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		s.t.Fatalf("etcdtest: %v", err)
	}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("etcdtest: start the etcd child process: %v", err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		_ = stdin.Close()
		s.t.Fatalf("etcdtest: the etcd child process did not start (%q, %v; does TestMain call etcdtest.RunIfChild?): %v", line, err, cmd.Wait())
	}
	s.child, s.stdin, s.stopped = cmd, stdin, false
}

// taken holds the ports handed out to this process's Servers: a Server
// that is stopped for a while (Stop, then Restart) keeps its ports, and no
// other Server of the process may be given them meanwhile.
var taken sync.Map

// freeURL is an http URL on a loopback port that was free a moment ago and
// that no other Server of this process holds.
func freeURL(t testing.TB) *url.URL {
	t.Helper()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("etcdtest: find a free port: %v", err)
		}
		addr := l.Addr().String()
		if err := l.Close(); err != nil {
			t.Fatalf("etcdtest: %v", err)
		}
		if _, held := taken.LoadOrStore(addr, true); !held {
			t.Cleanup(func() { taken.Delete(addr) })
			return &url.URL{Scheme: "http", Host: addr}
		}
	}
}
