package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
	"github.com/plugvisor/plugvisor/storage/storagetest"
)

// TestMain fails the package if any goroutine outlives the tests, or
// runs an etcd member when a test started the binary for one
// (etcdtest.StartProcess). protoactor's cluster leaves its gossip
// throttles' goroutines running after a cluster-mode agent stops; they
// hold nothing of the agent's.
func TestMain(m *testing.M) {
	etcdtest.RunIfChild()
	hostpathtest.Main(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/cluster.NewGossipActor.NewThrottleWithLogger.func2.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/cluster.(*Gossiper).StartGossiping.NewThrottle.func3.1"))
}

// backend is a registry on an in-memory store whose writes fail on demand.
type backend struct {
	registry *registry.Registry
	bucket   *storagetest.FlakyBucket
	logs     *bytes.Buffer
	server   *api.Server
}

// newBackend starts a registry for one test and an API server on it with
// no CSI parts; the server logs at trace level into logs.
func newBackend(t *testing.T) *backend {
	t.Helper()
	system := probe.NewSystem(t)
	mem, err := storage.NewMemory().Bucket(registry.BucketName)
	require.NoError(t, err)
	b := &backend{bucket: &storagetest.FlakyBucket{Bucket: mem}, logs: &bytes.Buffer{}}
	b.registry, err = registry.New(system, registry.Config{Bucket: b.bucket, Logger: probe.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.registry.Shutdown() })
	b.server = &api.Server{Registry: b.registry,
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, Output: b.logs})}
	return b
}

// request is one HTTP request to a handler.
type request struct {
	method, path, body string
	host               string            // default: the unix socket's "plugvisor"
	header             map[string]string // default for writes: Content-Type application/json
}

// answer is a handler's response.
type answer struct {
	status int
	header http.Header
	body   string
}

// error is the "error" member of a JSON error body, or "".
func (a answer) error(t *testing.T) string {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(a.body), &e), a.body)
	return e.Error
}

func serve(t *testing.T, h http.Handler, r request) answer {
	t.Helper()
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	req := httptest.NewRequest(r.method, "http://plugvisor"+r.path, body)
	req.Host = "plugvisor"
	if r.host != "" {
		req.Host = r.host
	}
	if r.header == nil && r.method != http.MethodGet {
		r.header = map[string]string{"Content-Type": "application/json"}
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return answer{status: rec.Code, header: rec.Header(), body: rec.Body.String()}
}

// unixListener is the policy the agent gives its unix socket.
var unixListener = api.Listener{Name: "unix socket /run/plugvisor.sock", Hosts: []string{"plugvisor", "localhost"}}

func registerBody(name, alloc string) string {
	return `{"type":"csi-node","name":"` + name + `","alloc_id":"` + alloc + `","connection":{"socket_path":"/run/csi/` + alloc + `.sock"}}`
}

// followEvents opens GET /v1/events with query on a real HTTP server and
// returns a function that reads the stream's next line.
func followEvents(t *testing.T, b *backend, query string) func(*testing.T) []byte {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	srv.Config.Handler = b.server.HandlerFor(api.Listener{Name: "test", Port: port})
	srv.Start()
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/events"+query, nil)
	require.NoError(t, err)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "application/x-ndjson", resp.Header.Get("Content-Type"))
	lines := bufio.NewScanner(resp.Body)
	return func(t *testing.T) []byte {
		t.Helper()
		require.True(t, lines.Scan(), "a line: %v", lines.Err())
		return lines.Bytes()
	}
}
