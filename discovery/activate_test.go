package discovery

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/docker/go-plugins-helpers/sdk"
	"github.com/docker/go-plugins-helpers/volume"
	"github.com/stretchr/testify/require"

	actorprobe "github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/names"
)

// server is what go-plugins-helpers handlers offer.
type server interface{ Serve(net.Listener) error }

// serve serves h on a new unix socket at path until the test ends.
func serve(t *testing.T, path string, h server) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	l, err := net.Listen("unix", path)
	require.NoError(t, err)
	serveOn(t, l, h)
}

// serveOn serves h on l until the test ends. Closing l stops Serve; the
// clients in this package close their connections after every call, so no
// connection goroutine outlives the test.
func serveOn(t *testing.T, l net.Listener, h server) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = h.Serve(l)
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
	})
}

// manifestJSON returns the activation answer of a plugin implementing ifaces.
func manifestJSON(ifaces ...string) string {
	b, _ := json.Marshal(Manifest{Implements: ifaces})
	return string(b)
}

// activationOnly is a volume.Driver for tests that only activate: the
// handshake never reaches the driver, so its (nil) methods are never called.
type activationOnly struct{ volume.Driver }

// fakePlugin serves h on a unix socket and returns the plugin's candidate,
// found with Lookup.
func fakePlugin(t *testing.T, h http.HandlerFunc) Candidate {
	t.Helper()
	dir := tempDir(t)
	l, err := net.Listen("unix", filepath.Join(dir, "fake.sock"))
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := Lookup(Dirs{Sockets: []string{dir}}, "fake")
	require.NoError(t, err)
	return c
}

// reply returns a handler answering status, content type and body.
func reply(status int, contentType, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if contentType == "" {
			w.Header()["Content-Type"] = nil // no sniffing either
		} else {
			w.Header().Set("Content-Type", contentType)
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

func TestActivateRealVolumePlugin(t *testing.T) {
	dir := tempDir(t)
	serve(t, filepath.Join(dir, "vol.sock"), volume.NewHandler(activationOnly{}))
	c, err := Lookup(Dirs{Sockets: []string{dir}}, "vol")
	require.NoError(t, err)

	m, err := Activate(context.Background(), c, ActivateOptions{})
	require.NoError(t, err)
	require.Equal(t, Manifest{Implements: []string{"VolumeDriver"}}, m)
	require.Equal(t, []string{TypeDockerVolume}, TypesFor(m))
}

func TestActivateOverPlainTCP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serveOn(t, l, sdk.NewHandler(manifestJSON("NetworkDriver", "IpamDriver")))
	dir := tempDir(t)
	writeFile(t, filepath.Join(dir, "net.spec"), "tcp://"+l.Addr().String())
	c, err := Lookup(Dirs{Specs: []string{dir}}, "net")
	require.NoError(t, err)

	m, err := Activate(context.Background(), c, ActivateOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"NetworkDriver", "IpamDriver"}, m.Implements)
}

func TestActivateSendsWhatDockerSends(t *testing.T) {
	var got *http.Request
	var body []byte
	c := fakePlugin(t, func(w http.ResponseWriter, r *http.Request) {
		got = r
		body, _ = io.ReadAll(r.Body)
		reply(http.StatusOK, MediaTypeV11, manifestJSON("VolumeDriver"))(w, r)
	})
	_, err := Activate(context.Background(), c, ActivateOptions{})
	require.NoError(t, err)
	require.Equal(t, http.MethodPost, got.Method)
	require.Equal(t, "/Plugin.Activate", got.URL.Path)
	require.Equal(t, "plugin.moby.localhost", got.Host)
	mt, _, err := mime.ParseMediaType(got.Header.Get("Accept"))
	require.NoError(t, err)
	require.Equal(t, MediaTypeV12, mt)
	require.Empty(t, body, "Docker sends no body with the handshake")
}

func TestActivateAcceptsDockerMediaTypes(t *testing.T) {
	for _, tt := range []struct{ name, contentType string }{
		{"version 1.1", MediaTypeV11},
		{"version 1.2 with a charset", MediaTypeV12 + "; charset=utf-8"},
		{"version 1 in capitals", "Application/VND.Docker.Plugins.V1+JSON"},
		{"plain JSON", "application/json"},
		{"no content type at all", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := fakePlugin(t, reply(http.StatusOK, tt.contentType, manifestJSON("LogDriver")))
			m, err := Activate(context.Background(), c, ActivateOptions{})
			require.NoError(t, err)
			require.Equal(t, []string{"LogDriver"}, m.Implements)
		})
	}
}

func TestActivateFailures(t *testing.T) {
	tests := []struct {
		name       string
		handler    http.HandlerFunc
		wantErr    error
		wantStatus int
		wantText   string
	}{
		{
			name:       "invalid JSON is a bad response",
			handler:    reply(http.StatusOK, MediaTypeV11, `{"Implements": [`),
			wantErr:    ErrBadResponse,
			wantStatus: http.StatusOK,
			wantText:   "invalid manifest",
		},
		{
			name:       "an HTML page is a bad response",
			handler:    reply(http.StatusOK, "text/html; charset=utf-8", manifestJSON("VolumeDriver")),
			wantErr:    ErrBadResponse,
			wantStatus: http.StatusOK,
			wantText:   `content type "text/html; charset=utf-8" is not a Docker plugin media type`,
		},
		{
			name:       "a content type that does not parse is a bad response",
			handler:    reply(http.StatusOK, "application/json; =broken", manifestJSON("VolumeDriver")),
			wantErr:    ErrBadResponse,
			wantStatus: http.StatusOK,
			wantText:   "content type",
		},
		{
			name:       "a newer major version is a bad response",
			handler:    reply(http.StatusOK, "application/vnd.docker.plugins.v2+json", manifestJSON("VolumeDriver")),
			wantErr:    ErrBadResponse,
			wantStatus: http.StatusOK,
			wantText:   "not a Docker plugin media type",
		},
		{
			name:       "a manifest without Implements is a bad response",
			handler:    reply(http.StatusOK, MediaTypeV11, `{}`),
			wantErr:    ErrBadResponse,
			wantStatus: http.StatusOK,
			wantText:   "no Implements list",
		},
		{
			name:       "Implements as a string is a bad response",
			handler:    reply(http.StatusOK, MediaTypeV11, `{"Implements": "VolumeDriver"}`),
			wantErr:    ErrBadResponse,
			wantStatus: http.StatusOK,
			wantText:   "invalid manifest",
		},
		{
			name:       "HTTP 500 carries the plugin's Err text",
			handler:    reply(http.StatusInternalServerError, MediaTypeV11, `{"Err": "disk on fire"}`),
			wantErr:    ErrPluginFailed,
			wantStatus: http.StatusInternalServerError,
			wantText:   "disk on fire (HTTP 500)",
		},
		{
			name:       "HTTP 500 without JSON carries the body",
			handler:    reply(http.StatusInternalServerError, "text/plain", "out of memory\n"),
			wantErr:    ErrPluginFailed,
			wantStatus: http.StatusInternalServerError,
			wantText:   "out of memory (HTTP 500)",
		},
		{
			name:       "HTTP 503 with no body says its status",
			handler:    reply(http.StatusServiceUnavailable, "", ""),
			wantErr:    ErrPluginFailed,
			wantStatus: http.StatusServiceUnavailable,
			wantText:   "Service Unavailable (HTTP 503)",
		},
		{
			name:       "an Err field in a 200 answer is the plugin's error",
			handler:    reply(http.StatusOK, MediaTypeV11, `{"Err": "not ready yet"}`),
			wantErr:    ErrPluginFailed,
			wantStatus: http.StatusOK,
			wantText:   "not ready yet",
		},
		{
			name:       "404 means not a plugin",
			handler:    http.NotFound,
			wantErr:    ErrNotAPlugin,
			wantStatus: http.StatusNotFound,
			wantText:   "404 page not found (HTTP 404)",
		},
		{
			name: "a redirect is not followed",
			handler: func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, "/elsewhere", http.StatusFound)
			},
			wantErr:    ErrPluginFailed,
			wantStatus: http.StatusFound,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fakePlugin(t, tt.handler)
			_, err := Activate(context.Background(), c, ActivateOptions{})
			requireCallError(t, err, tt.wantErr, "Plugin.Activate")
			var ce *CallError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, tt.wantStatus, ce.StatusCode)
			require.ErrorContains(t, err, tt.wantText)
		})
	}
}

// requireCallError checks that err is a *CallError of kind about the fake
// plugin's method, and that its message says so once.
func requireCallError(t *testing.T, err, kind error, method string) {
	t.Helper()
	require.ErrorIs(t, err, kind)
	var ce *CallError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, method, ce.Method)
	msg := err.Error()
	require.True(t, strings.HasPrefix(msg, kind.Error()+`: plugin "`+ce.Plugin+`", `+method), msg)
	require.Equal(t, 1, strings.Count(msg, kind.Error()), msg)
}

// silentPlugin returns a plugin whose handler never answers until the test ends.
func silentPlugin(t *testing.T) Candidate {
	release := make(chan struct{})
	c := fakePlugin(t, func(http.ResponseWriter, *http.Request) { <-release })
	t.Cleanup(func() { close(release) }) // runs before the server's Close
	return c
}

func TestActivateTimesOut(t *testing.T) {
	tests := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		opts ActivateOptions
	}{
		{
			name: "the context's deadline",
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 100*time.Millisecond)
			},
		},
		{
			name: "the options' timeout",
			ctx:  func() (context.Context, context.CancelFunc) { return context.Background(), func() {} },
			opts: ActivateOptions{Timeout: 100 * time.Millisecond},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := silentPlugin(t)
			ctx, cancel := tt.ctx()
			defer cancel()
			start := time.Now()
			_, err := Activate(ctx, c, tt.opts)
			requireCallError(t, err, ErrTimeout, "Plugin.Activate")
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.Less(t, time.Since(start), 5*time.Second)
		})
	}
}

func TestActivateCanceled(t *testing.T) {
	c := silentPlugin(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err := Activate(ctx, c, ActivateOptions{})
	requireCallError(t, err, ErrCanceled, "Plugin.Activate")
	require.ErrorIs(t, err, context.Canceled)
}

func TestActivateUnreachable(t *testing.T) {
	dir := tempDir(t)
	makeSocket(t, filepath.Join(dir, "dead.sock")) // nobody listens
	c, err := Lookup(Dirs{Sockets: []string{dir}}, "dead")
	require.NoError(t, err)
	_, err = Activate(context.Background(), c, ActivateOptions{})
	requireCallError(t, err, ErrUnreachable, "Plugin.Activate")
	require.ErrorContains(t, err, "connection refused")
}

func TestCallRoundTrip(t *testing.T) {
	type echo struct {
		Name string
		Opts map[string]string
	}
	var contentType string
	c := fakePlugin(t, func(w http.ResponseWriter, r *http.Request) {
		contentType = r.Header.Get("Content-Type")
		var in echo
		if r.URL.Path != "/Echo.Back" || json.NewDecoder(r.Body).Decode(&in) != nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", MediaTypeV11)
		json.NewEncoder(w).Encode(map[string]any{"Name": in.Name + "!", "Opts": in.Opts, "Err": ""})
	})
	var out echo
	err := Call(context.Background(), c, "Echo.Back", echo{Name: "hi", Opts: map[string]string{"a": "b"}}, &out)
	require.NoError(t, err)
	require.Equal(t, echo{Name: "hi!", Opts: map[string]string{"a": "b"}}, out)
	require.Equal(t, MediaTypeV12, contentType)

	require.NoError(t, Call(context.Background(), c, "Echo.Back", echo{}, nil), "a nil resp skips decoding")
}

func TestCallFailures(t *testing.T) {
	plugin := fakePlugin(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/Volume.Fails":
			reply(http.StatusInternalServerError, MediaTypeV11, `{"Err": "volume v1 is busy"}`)(w, r)
		case "/Volume.Garbles":
			reply(http.StatusOK, MediaTypeV11, `{"Name": 7}`)(w, r)
		default:
			http.NotFound(w, r)
		}
	})
	var out struct{ Name string }
	tests := []struct {
		name    string
		c       Candidate
		method  string
		req     any
		wantErr error
		errText string
	}{
		{name: "the plugin's error text", c: plugin, method: "Volume.Fails", wantErr: ErrPluginFailed, errText: "volume v1 is busy (HTTP 500)"},
		{name: "a method the plugin lacks", c: plugin, method: "Volume.Absent", wantErr: ErrNotImplemented, errText: "(HTTP 404)"},
		{name: "an answer of the wrong shape", c: plugin, method: "Volume.Garbles", wantErr: ErrBadResponse, errText: "invalid JSON"},
		{name: "an empty method name", c: plugin, method: "", wantErr: ErrInvalidCall, errText: "bad method name"},
		{name: "a method name with a path in it", c: plugin, method: "../Plugin.Activate", wantErr: ErrInvalidCall, errText: "bad method name"},
		{name: "a request that cannot be encoded", c: plugin, method: "Volume.Fails", req: make(chan int), wantErr: ErrInvalidCall, errText: "encode request"},
		{name: "a candidate without address", c: Candidate{Name: "nowhere"}, method: "X.Y", wantErr: ErrInvalidCall, errText: "exactly one of"},
		{name: "a candidate with both addresses", c: Candidate{Name: "both", SocketPath: "/x.sock", TCPAddr: "h:1"}, method: "X.Y", wantErr: ErrInvalidCall, errText: "exactly one of"},
		{name: "a candidate with a socket path over 107 bytes", c: Candidate{Name: "long", SocketPath: "/" + strings.Repeat("x", MaxSocketPathLen)}, method: "X.Y", wantErr: ErrSocketPathTooLong, errText: "108 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Call(context.Background(), tt.c, tt.method, tt.req, &out)
			requireCallError(t, err, tt.wantErr, tt.method)
			require.ErrorContains(t, err, tt.errText)
		})
	}
}

func TestCallErrorMessageHoldsThePluginText(t *testing.T) {
	plugin := fakePlugin(t, reply(http.StatusInternalServerError, MediaTypeV11, `{"Err": "no space left"}`))
	err := Call(context.Background(), plugin, "VolumeDriver.Create", map[string]string{"Name": "v"}, nil)
	require.EqualError(t, err, `plugin returned an error: plugin "fake", VolumeDriver.Create: no space left (HTTP 500)`)
	var ce *CallError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "no space left", ce.Message)
}

// TestLongPluginErrorsAreCutAndMadeSafe: a plugin's error text, in a
// body or in its "Err", is kept as names.Text makes it: at most
// names.MaxTextLen bytes, cut on a rune boundary, one line of UTF-8
// without control or bidirectional characters.
func TestLongPluginErrorsAreCutAndMadeSafe(t *testing.T) {
	long := strings.Repeat("é", names.MaxTextLen) // two bytes each
	hostile := "no\nspace \u202Eleft\xff" + strings.Repeat("x", 3<<20)
	for _, plugin := range []Candidate{
		fakePlugin(t, reply(http.StatusInternalServerError, "", long)),
		fakePlugin(t, reply(http.StatusInternalServerError, "", hostile)),
		fakePlugin(t, reply(http.StatusOK, MediaTypeV11, `{"Err":"`+strings.ReplaceAll(hostile, "\n", `\n`)+`"}`)),
	} {
		err := Call(context.Background(), plugin, "X.Y", nil, nil)
		var ce *CallError
		require.ErrorAs(t, err, &ce)
		require.LessOrEqual(t, len(ce.Message), names.MaxTextLen+64)
		require.Contains(t, ce.Message, "… (cut at 1024 of ")
		require.True(t, utf8.ValidString(ce.Message))
		require.NotContains(t, ce.Message, "\u202E")
		require.NotContains(t, ce.Message, "\n")
	}
}

func TestTypesFor(t *testing.T) {
	tests := []struct {
		name       string
		implements []string
		want       []string
	}{
		{"every Docker interface", []string{"VolumeDriver", "NetworkDriver", "IpamDriver", "authz", "LogDriver", "MetricsCollector"},
			[]string{"docker-volume", "docker-network", "docker-ipam", "docker-authz", "docker-log", "docker-metrics"}},
		{"unknown interfaces are kept as they are", []string{"SecretProvider", "VolumeDriver"}, []string{"SecretProvider", "docker-volume"}},
		{"repeats are dropped", []string{"VolumeDriver", "VolumeDriver"}, []string{"docker-volume"}},
		{"nothing implemented", nil, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, TypesFor(Manifest{Implements: tt.implements}))
		})
	}
}

// A CSI plugin's gRPC server speaks first, its HTTP/2 settings, as soon as
// a client connects. The Docker handshake tried first on every socket must
// take them as the answer they are, not as an unsolicited response that
// net/http reports on the process's standard logger.
func TestTheDockerHandshakeWithACSIPluginLeavesNoStrayLogLine(t *testing.T) {
	var stray actorprobe.LogBuffer
	prev, flags := log.Writer(), log.Flags()
	log.SetOutput(&stray)
	t.Cleanup(func() { log.SetOutput(prev); log.SetFlags(flags) })
	srv := hostpathtest.Serve(t, hostpath.Config{Name: "hostpath.csi.test", NodeID: "node-1",
		Root: hostpathtest.TempDir(t), Mode: hostpath.ModeMonolith})
	c := Candidate{Name: "csi", SocketPath: srv.Endpoint}
	for range 20 {
		act, err := activatePlugin(context.Background(), c, 5*time.Second, 5*time.Second)
		require.NoError(t, err)
		require.Equal(t, ProtocolCSI, act.protocol)
	}
	require.Empty(t, stray.String())
}
