package agent_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/messages"
)

// hangingPlugin is the reference plugin, served so that the RPCs named
// in hang block until released: they then fail, and never reach the
// plugin; and those named in fail answer their error at once.
type hangingPlugin struct {
	endpoint string
	mu       sync.Mutex
	hang     map[string]bool
	fail     map[string]error
	released chan struct{}
	hung     atomic.Int32 // RPCs hung so far
}

// serveHangingHostpath serves the reference plugin in monolith mode on a
// socket below dir until the test ends, releasing every hung RPC first.
func serveHangingHostpath(t *testing.T, dir string) *hangingPlugin {
	t.Helper()
	d, err := hostpath.New(hostpath.Config{Name: "hp", NodeID: "n1", Root: filepath.Join(dir, "hp"),
		Mode: hostpath.ModeMonolith, SymlinkFallback: true, Logger: probe.Logger(t)})
	require.NoError(t, err)
	p := &hangingPlugin{endpoint: filepath.Join(hostpathtest.TempDir(t), "csi.sock"), hang: map[string]bool{},
		released: make(chan struct{})}
	srv := grpc.NewServer(grpc.UnaryInterceptor(p.intercept))
	d.Register(srv)
	l, err := net.Listen("unix", p.endpoint)
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		p.release()
		srv.Stop()
		require.NoError(t, <-served)
	})
	return p
}

// intercept blocks an RPC named in hang until release.
func (p *hangingPlugin) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	p.mu.Lock()
	rpc := filepath.Base(info.FullMethod)
	hang, failure, released := p.hang[rpc], p.fail[rpc], p.released
	p.mu.Unlock()
	if failure != nil {
		return nil, failure
	}
	if !hang {
		return next(ctx, req)
	}
	p.hung.Add(1)
	<-released
	return nil, status.Error(codes.Unavailable, "the plugin hung")
}

// hangOnly makes the RPCs named hang, and releases those hung before.
func (p *hangingPlugin) hangOnly(rpcs ...string) {
	p.release()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hang, p.fail, p.released = map[string]bool{}, nil, make(chan struct{})
	for _, rpc := range rpcs {
		p.hang[rpc] = true
	}
}

// failWith makes rpc answer err, and no other RPC fail or hang.
func (p *hangingPlugin) failWith(rpc string, err error) {
	p.hangOnly()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail = map[string]error{rpc: err}
}

func (p *hangingPlugin) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.released:
	default:
		close(p.released)
	}
}

// startWithHangingPlugin starts an agent of node n1 with cfg, quick to
// fingerprint, serves the reference plugin "hp" through a hangingPlugin
// and registers it, and waits until its controller and node are healthy.
// The agent stops with the test.
func startWithHangingPlugin(t *testing.T, cfg agent.Config) (*agent.Agent, *hangingPlugin, *http.Client) {
	t.Helper()
	cfg.NodeID, cfg.FingerprintInterval, cfg.ResyncInterval = "n1", 50*time.Millisecond, time.Second
	a, err := agent.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Shutdown(context.Background())) })
	plugin := serveHangingHostpath(t, cfg.DataDir)
	for _, ptype := range []string{csi.TypeController, csi.TypeNode} {
		require.NoError(t, a.Registry().RegisterPlugin(&messages.PluginInfo{Type: ptype, Name: "hp", AllocId: "a1",
			Connection: &messages.ConnectionInfo{SocketPath: plugin.endpoint}}))
	}
	require.Eventually(t, func() bool {
		healthy := 0
		for _, fp := range a.CSI().Plugins() {
			if fp.GetHealthy() {
				healthy++
			}
		}
		return healthy == 2
	}, 20*time.Second, 10*time.Millisecond, "the controller and node plugins are healthy")
	return a, plugin, unixClient(t, a)
}

// createDB creates volume default/db on "hp" through a's API, requires
// the status want, and returns the answer; once created, it waits until
// the volume is schedulable.
func createDB(t *testing.T, a *agent.Agent, c *http.Client, want int) string {
	t.Helper()
	status, body, err := call(c, "POST", "http://plugvisor/v1/volumes/default/db/create", "",
		`{"plugin_id":"hp","access_mode":"single-node-writer","capacity":{"required_bytes":1048576}}`)
	require.NoError(t, err)
	require.Equal(t, want, status, "create: %s", body)
	if status == http.StatusCreated {
		require.Eventually(t, func() bool {
			v, err := a.Catalog().GetVolume(context.Background(), "default", "db")
			return err == nil && v.Schedulable
		}, 20*time.Second, 20*time.Millisecond)
	}
	return body
}

// TestAHangingPluginGetsTheOperationTimeoutNotTheServers is attack 4 of
// issue 39: a mount or unmount whose plugin hangs answers 504 at the
// volume operation timeout, not 500 when the HTTP server's read timeout
// (shorter here, as 30 s is shorter than 2 minutes in production) ends
// the request; and the claim and the record say what is true afterwards:
// a mount that failed holds nothing, an unmount that failed keeps its
// claim until a retry unmounts it.
func TestAHangingPluginGetsTheOperationTimeoutNotTheServers(t *testing.T) {
	const readTimeout, opTimeout = 300 * time.Millisecond, 3 * time.Second
	dir := dataDir(t)
	a, plugin, c := startWithHangingPlugin(t, agent.Config{DataDir: dir, Logger: probe.Logger(t),
		VolumeOperationTimeout: opTimeout, HTTPLimits: agent.HTTPLimits{ReadTimeout: readTimeout}})
	do := func(op string, want int) string {
		t.Helper()
		status, body, err := call(c, "POST", "http://plugvisor/v1/volumes/default/db/"+op, "", `{"alloc_id":"web-1"}`)
		require.NoError(t, err)
		require.Equal(t, want, status, "%s: %s", op, body)
		return body
	}
	ctx := context.Background()
	plugin.hangOnly("CreateVolume")
	require.Contains(t, createDB(t, a, c, http.StatusGatewayTimeout), "CreateVolume")
	_, err := a.Catalog().GetVolume(ctx, "default", "db")
	require.Error(t, err, "a create that timed out registered nothing")
	plugin.hangOnly()
	createDB(t, a, c, http.StatusCreated)

	plugin.hangOnly("NodePublishVolume")
	require.Contains(t, do("mount", http.StatusGatewayTimeout), "mount did not finish within 3s")
	require.Eventually(t, func() bool {
		st, err := a.Volumes().Status(ctx, "default", "db")
		v, verr := a.Catalog().GetVolume(ctx, "default", "db")
		return err == nil && verr == nil && !st.Busy && len(st.Record.GetPublishes()) == 0 && len(v.WriteClaims) == 0
	}, 20*time.Second, 20*time.Millisecond, "the mount that timed out rolled back: no publish, no claim")
	require.Empty(t, mountsUnder(t, dir))

	plugin.hangOnly()
	do("mount", http.StatusOK)
	plugin.hangOnly("NodeUnpublishVolume")
	require.Contains(t, do("unmount", http.StatusGatewayTimeout), "unmount did not finish within 3s")
	require.Eventually(t, func() bool {
		st, err := a.Volumes().Status(ctx, "default", "db")
		return err == nil && !st.Busy
	}, 20*time.Second, 20*time.Millisecond)
	v, err := a.Catalog().GetVolume(ctx, "default", "db")
	require.NoError(t, err)
	require.Contains(t, v.WriteClaims, "web-1", "a volume still published keeps its claim")
	st, err := a.Volumes().Status(ctx, "default", "db")
	require.NoError(t, err)
	require.Contains(t, st.Record.GetPublishes(), "web-1", "the record keeps the publish it could not undo")

	plugin.hangOnly()
	do("unmount", http.StatusOK)
	v, err = a.Catalog().GetVolume(ctx, "default", "db")
	require.NoError(t, err)
	require.Empty(t, v.WriteClaims, "the unmount that finished released the claim")
	require.Empty(t, mountsUnder(t, dir))
}

// TestABodyStillArrivesWithinTheReadTimeout: with the server's own read
// timeout gone, a body sent above the minimum rate, but for longer than
// the read timeout, is still cut: the gate bounds every body.
func TestABodyStillArrivesWithinTheReadTimeout(t *testing.T) {
	const readTimeout = 500 * time.Millisecond
	a := startWith(t, agent.Config{HTTPLimits: agent.HTTPLimits{MinBodyRate: 100,
		ReadHeaderTimeout: 100 * time.Millisecond, ReadTimeout: readTimeout}})
	body := plugin + strings.Repeat(" ", 4000)
	conn, err := net.Dial("unix", a.SocketPath())
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST /v1/plugins HTTP/1.1\r\nHost: plugvisor\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", len(body))
	require.NoError(t, err)
	cut := false
	for chunk := range chunks(body, 100) {
		if _, err := io.WriteString(conn, chunk); err != nil {
			cut = true
			break
		}
		time.Sleep(50 * time.Millisecond) // 2000 bytes a second, for 2 seconds
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, _ := io.ReadAll(conn)
	require.False(t, strings.HasPrefix(string(got), "HTTP/1.1 200"), "a body past the read timeout was served (cut while sending: %t): %s", cut, got)
	_, ok := a.Registry().Snapshot().Current("csi-node", "p")
	require.False(t, ok, "nothing was registered")
}

// TestARequestTheAgentsStopCancelsIsAnswered503ShutDown: a request in
// flight when the agent stops (a mount whose plugin hangs) is answered
// 503, shut down, naming the stop; it is not taken for a caller that went
// away (499) nor for a failure of the agent's (500).
func TestARequestTheAgentsStopCancelsIsAnswered503ShutDown(t *testing.T) {
	dir := dataDir(t)
	a, plugin, c := startWithHangingPlugin(t, agent.Config{DataDir: dir, Logger: probe.Logger(t), VolumeOperationTimeout: 2 * time.Second})
	createDB(t, a, c, http.StatusCreated)
	plugin.hangOnly("NodePublishVolume")
	type answer struct {
		status int
		body   string
		err    error
	}
	answered := make(chan answer, 1)
	go func() {
		status, body, err := call(c, "POST", "http://plugvisor/v1/volumes/default/db/mount", "", `{"alloc_id":"web-1"}`)
		answered <- answer{status, body, err}
	}()
	require.Eventually(t, func() bool { return plugin.hung.Load() > 0 }, 20*time.Second, 5*time.Millisecond, "the mount reached the plugin")
	require.NoError(t, a.Shutdown(context.Background()))
	got := <-answered
	require.NoError(t, got.err)
	require.Equal(t, http.StatusServiceUnavailable, got.status, got.body)
	require.Contains(t, got.body, `"code": "shut_down"`)
	require.Contains(t, got.body, "the agent is stopping")
}
