// Package hostpathtest runs the hostpath CSI plugin for tests: in-process on
// a real unix socket (Serve), or as its own process built from
// cmd/hostpath-csi (StartProcess) that a test can kill for real. Everything
// it starts is stopped, and every mount left under its directories removed,
// in t.Cleanup.
package hostpathtest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/hashicorp/go-hclog"

	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/internal/mount"
)

// Main runs the tests of a package, removes the binary BuildBinary built,
// checks with goleak that no goroutine outlives the tests, and exits.
// Call it from TestMain.
func Main(m *testing.M, opts ...goleak.Option) {
	code := m.Run()
	RemoveBinary()
	if code == 0 {
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "hostpathtest: goroutines leaked: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// TempDir creates a directory with a short path (under the OS temp dir, not
// t.TempDir, whose paths can be too long for a unix socket) and removes it in
// t.Cleanup after unmounting every mount left below it, so a test that
// failed half way, or a plugin killed with mounts in place, leaves nothing.
// The returned path has its symbolic links resolved.
func TempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pv")
	if err != nil {
		t.Fatalf("hostpathtest: %v", err)
	}
	if dir, err = filepath.EvalSymlinks(dir); err != nil {
		t.Fatalf("hostpathtest: %v", err)
	}
	t.Cleanup(func() {
		if err := UnmountAll(t, dir); err != nil {
			t.Errorf("hostpathtest: %v; leaving %s in place", err, dir)
			return
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("hostpathtest: %v", err)
		}
	})
	return dir
}

// UnmountAll lazily unmounts every mount at or below dir, newest first, and
// logs each one: a test that unpublished what it published leaves none.
func UnmountAll(t testing.TB, dir string) error {
	t.Helper()
	points, err := mount.Under(dir)
	if err != nil {
		return err
	}
	for _, p := range points {
		t.Logf("hostpathtest: unmounting leftover mount %s", p)
		if err := mount.Detach(p); err != nil {
			return err
		}
	}
	return nil
}

// Logger returns a logger that writes to the test's output.
func Logger(t testing.TB) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Info, Output: t.Output()})
}

// Dial connects to a plugin's unix socket and closes the connection in
// t.Cleanup. The connection retries quickly, so a plugin that is still
// starting is reached soon after it listens.
func Dial(t testing.TB, endpoint string) *grpc.ClientConn {
	t.Helper()
	path, err := hostpath.ParseEndpoint(endpoint)
	if err != nil {
		t.Fatalf("hostpathtest: %v", err)
	}
	conn, err := grpc.NewClient("unix://"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, MaxDelay: 500 * time.Millisecond},
			MinConnectTimeout: 2 * time.Second,
		}))
	if err != nil {
		t.Fatalf("hostpathtest: dial %s: %v", path, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// Server is a driver served in-process on a unix socket.
type Server struct {
	// Endpoint is the socket path.
	Endpoint string
	// Driver is the served driver.
	Driver *hostpath.Driver
}

// Serve creates a driver from cfg and serves it on a socket in a TempDir
// until t.Cleanup stops it. A nil cfg.Logger logs to the test's output.
func Serve(t testing.TB, cfg hostpath.Config) *Server {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = Logger(t)
	}
	d, err := hostpath.New(cfg)
	if err != nil {
		t.Fatalf("hostpathtest: %v", err)
	}
	l, err := d.Listen(filepath.Join(TempDir(t), "csi.sock"))
	if err != nil {
		t.Fatalf("hostpathtest: %v", err)
	}
	served := make(chan error, 1)
	go func() { served <- d.Serve(l) }()
	t.Cleanup(func() {
		d.Stop()
		if err := <-served; err != nil {
			t.Errorf("hostpathtest: serve: %v", err)
		}
	})
	return &Server{Endpoint: l.Addr().String(), Driver: d}
}

// ForgetVolume removes the record of volume id from the driver rooted at
// root, behind the driver's back, as a volume deleted under its mounts:
// the upstream kubernetes-csi hostpath driver deletes a volume in use
// unless it runs with -check-volume-lifecycle, which this driver refuses
// to do. The volume's directory and every mount of it stay; from then on
// the driver answers NotFound for the volume.
func ForgetVolume(t testing.TB, root, id string) {
	t.Helper()
	if err := os.Remove(filepath.Join(root, "state", "volumes", id+".json")); err != nil {
		t.Fatalf("hostpathtest: forget volume %s: %v", id, err)
	}
}
