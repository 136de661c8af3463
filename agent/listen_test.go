package agent_test

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/internal/testpki"
	"github.com/plugvisor/plugvisor/messages"
)

const (
	writeToken = "w-0123456789abcdef0123456789abcdef"
	readToken  = "r-0123456789abcdef0123456789abcdef"
)

// tokenFile writes a token file with a write and a read token.
func tokenFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(path, []byte("# test tokens\n"+writeToken+" write\n"+readToken+" read\n"), 0o600))
	return path
}

// httpClient is a client on transport whose idle connections close with
// the test.
func httpClient(t testing.TB, transport *http.Transport) *http.Client {
	t.Cleanup(transport.CloseIdleConnections)
	return &http.Client{Transport: transport, Timeout: 30 * time.Second}
}

// unixClient talks to the agent's API socket.
func unixClient(t testing.TB, a *agent.Agent) *http.Client {
	return httpClient(t, &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", a.SocketPath())
	}})
}

// call sends a request and returns the status and body, or the transport
// error.
func call(c *http.Client, method, url, token, body string) (int, string, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	if method != http.MethodGet {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

const plugin = `{"type":"csi-node","name":"p","alloc_id":"a1","connection":{"socket_path":"/run/csi/p.sock"}}`

func startWith(t *testing.T, cfg agent.Config) *agent.Agent {
	t.Helper()
	cfg.DataDir, cfg.NodeID = dataDir(t), "n1"
	if cfg.Logger == nil {
		cfg.Logger = probe.Logger(t)
	}
	a, err := agent.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Shutdown(context.Background())) })
	return a
}

func TestAnUnprotectedOrMisconfiguredListenerIsRefusedAtStart(t *testing.T) {
	tokens := tokenFile(t)
	openTokens := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(openTokens, []byte(writeToken+" write\n"), 0o644))
	p := newPKI(t)
	cases := []struct {
		name string
		cfg  agent.Config
		is   error
		want string
	}{
		{"every interface without TLS", agent.Config{HTTPAddr: "0.0.0.0:0"}, agent.ErrUnprotectedHTTP,
			"-http 0.0.0.0:0 reaches beyond this host without TLS: give -tls-cert, -tls-key and -tls-ca"},
		{"no host without TLS", agent.Config{HTTPAddr: ":0"}, agent.ErrUnprotectedHTTP, "reaches beyond this host without TLS"},
		{"every interface with tokens but no TLS", agent.Config{HTTPAddr: "0.0.0.0:0", TokenFile: tokens}, agent.ErrUnprotectedHTTP,
			"or give -http-insecure"},
		{"loopback with neither tokens nor TLS", agent.Config{HTTPAddr: "127.0.0.1:0"}, agent.ErrUnprotectedHTTP,
			"is open to every local user and process: give -token-file"},
		{"localhost with neither tokens nor TLS", agent.Config{HTTPAddr: "localhost:0"}, agent.ErrUnprotectedHTTP, "give -token-file"},
		{"TLS without its CA", agent.Config{HTTPAddr: "127.0.0.1:0", TLSCert: p.certFile, TLSKey: p.keyFile}, agent.ErrInvalidConfig,
			"TLS needs -tls-cert, -tls-key and -tls-ca together; -tls-ca missing"},
		{"a CA file that is no certificate", agent.Config{HTTPAddr: "127.0.0.1:0", TLSCert: p.certFile, TLSKey: p.keyFile, TLSCA: tokens},
			agent.ErrInvalidConfig, "holds no PEM certificate"},
		{"TLS without -http", agent.Config{TLSCert: p.certFile, TLSKey: p.keyFile, TLSCA: p.caFile}, agent.ErrInvalidConfig, "give -http too"},
		{"a token file without -http", agent.Config{TokenFile: tokens}, agent.ErrInvalidConfig, "give -http too"},
		{"a token file others can read", agent.Config{HTTPAddr: "127.0.0.1:0", TokenFile: openTokens}, api.ErrInvalidTokens, "chmod 600"},
		{"a host name with a port", agent.Config{HTTPAddr: "127.0.0.1:0", TokenFile: tokens, HTTPHosts: []string{"node1:4646"}},
			agent.ErrInvalidConfig, `-http-host "node1:4646" must be a bare host name`},
		{"a negative limit", agent.Config{HTTPLimits: agent.HTTPLimits{ReadTimeout: -time.Second, MaxConns: -1}}, agent.ErrInvalidConfig,
			"HTTPLimits.MaxConns is -1"},
		{"a negative interval", agent.Config{ResyncInterval: -time.Second}, agent.ErrInvalidConfig,
			"ResyncInterval is -1s; give a positive duration"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.DataDir = dataDir(t)
			_, err := agent.Start(tc.cfg)
			require.ErrorIs(t, err, tc.is)
			require.ErrorIs(t, err, errclass.Invalid, "a refused config is the caller's to fix")
			require.ErrorContains(t, err, tc.want)
			_, statErr := os.Stat(agent.SocketPath(tc.cfg.DataDir))
			require.ErrorIs(t, statErr, os.ErrNotExist, "a refused agent serves nothing")
		})
	}
}

func TestInsecureHTTPServesButWarnsAtEveryStart(t *testing.T) {
	var logs probe.LogBuffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	dir := dataDir(t)
	for range 2 {
		a, err := agent.Start(agent.Config{DataDir: dir, HTTPAddr: "127.0.0.1:0", HTTPInsecure: true, Logger: logger})
		require.NoError(t, err)
		c := httpClient(t, &http.Transport{})
		status, body, err := call(c, "POST", "http://"+a.HTTPAddr()+"/v1/plugins", "", plugin)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status, body)
		require.NoError(t, a.Shutdown(context.Background()))
	}
	require.Equal(t, 2, strings.Count(logs.String(), "[WARN]  INSECURE: -http-insecure is set"), logs.String())
}

func TestALoopbackListenerWithTokensGivesEachItsRights(t *testing.T) {
	a := startWith(t, agent.Config{HTTPAddr: "127.0.0.1:0", TokenFile: tokenFile(t), HTTPHosts: []string{"node1.example"}})
	base := "http://" + a.HTTPAddr()
	c := httpClient(t, &http.Transport{})
	cases := []struct {
		name, method, path, token, body string
		status                          int
	}{
		{"no token reads nothing", "GET", "/v1/plugins", "", "", 401},
		{"a wrong token reads nothing", "GET", "/v1/plugins", "x-0123456789abcdef0123456789", "", 401},
		{"a read token reads", "GET", "/v1/plugins", readToken, "", 200},
		{"a read token may not register", "POST", "/v1/plugins", readToken, plugin, 403},
		{"a write token registers", "POST", "/v1/plugins", writeToken, plugin, 200},
		{"a read token may not deregister", "DELETE", "/v1/plugins/csi-node/p/a1", readToken, "", 403},
		{"health needs a token too", "GET", "/v1/health", "", "", 401},
		{"metrics need a token too", "GET", "/metrics", "", "", 401},
		{"metrics with a read token", "GET", "/metrics", readToken, "", 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, body, err := call(c, tc.method, base+tc.path, tc.token, tc.body)
			require.NoError(t, err)
			require.Equal(t, tc.status, status, body)
		})
	}
	require.Len(t, a.Registry().ListPlugins(""), 1, "only the write token's registration happened")

	// The unix socket trusts its file mode: no token.
	status, body, err := call(unixClient(t, a), "GET", "http://plugvisor/v1/plugins", "", "")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, body)

	// A configured name reaches it; a rebound name does not.
	_, port, _ := net.SplitHostPort(a.HTTPAddr())
	for host, want := range map[string]int{"node1.example:" + port: 200, "localhost:" + port: 200, "attacker.example:" + port: 421} {
		req, err := http.NewRequest("GET", base+"/v1/plugins", nil)
		require.NoError(t, err)
		req.Host = host
		req.Header.Set("Authorization", "Bearer "+readToken)
		resp, err := c.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, host)
	}
}

func TestATLSListenerServesOnlyClientsWithACertificateFromTheCA(t *testing.T) {
	p := newPKI(t)
	a := startWith(t, agent.Config{HTTPAddr: "127.0.0.1:0", TLSCert: p.certFile, TLSKey: p.keyFile, TLSCA: p.caFile,
		TokenFile: tokenFile(t)})
	url := "https://" + a.HTTPAddr() + "/v1/plugins"

	good := p.client(t, p.issue(t, "ops", x509.ExtKeyUsageClientAuth))
	status, body, err := call(good, "POST", url, writeToken, plugin)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, body)
	status, body, err = call(good, "POST", url, "", plugin)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, status, "a certificate does not stand in for the token: %s", body)

	rogue := testpki.NewCA(t, "someone else's CA")
	for name, c := range map[string]*http.Client{
		"no certificate":                  p.client(t),
		"a certificate from another CA":   p.client(t, rogue.Issue(t, "ops", x509.ExtKeyUsageClientAuth)),
		"a certificate for servers alone": p.client(t, p.issue(t, "server", x509.ExtKeyUsageServerAuth)),
	} {
		_, _, err := call(c, "GET", url, readToken, "")
		require.Error(t, err, name)
	}
	plain := httpClient(t, &http.Transport{})
	status, _, err = call(plain, "GET", "http://"+a.HTTPAddr()+"/v1/plugins", readToken, "")
	require.True(t, err != nil || status == http.StatusBadRequest, "plain HTTP gets no answer from a TLS listener")
	require.Len(t, a.Registry().ListPlugins(""), 1)
}

func TestSlowBodiesCannotHoldMoreThanTheConnectionCap(t *testing.T) {
	const maxConns, clients = 8, 120
	a := startWith(t, agent.Config{HTTPLimits: agent.HTTPLimits{MaxConns: maxConns, ReadTimeout: 3 * time.Second}})
	before := runtime.NumGoroutine()
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range clients {
		c, err := net.Dial("unix", a.SocketPath())
		require.NoError(t, err)
		conns = append(conns, c)
		_, err = fmt.Fprintf(c, "POST /v1/plugins HTTP/1.1\r\nHost: plugvisor\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n{")
		require.NoError(t, err)
	}
	// Watch the goroutines while the server takes what it will: without
	// the cap it would serve every client at once, two goroutines each.
	// Beyond the cap, up to 16 connections per slot wait aside for their
	// request, one small goroutine each.
	peak := 0
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		peak = max(peak, runtime.NumGoroutine())
	}
	require.Less(t, peak-before, 19*maxConns+10, "goroutines stay bounded by the connection cap")

	// The read timeout cuts a held body off.
	require.NoError(t, conns[0].SetReadDeadline(time.Now().Add(30*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conns[0]), nil)
	if err == nil {
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "a body cut off by the timeout is a bad request")
	} else {
		require.NotErrorIs(t, err, os.ErrDeadlineExceeded, "the server cut the connection within its read timeout")
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	status, body, err := call(unixClient(t, a), "GET", "http://plugvisor/v1/health", "", "")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, body)
}

func TestTheEventStreamOutlivesTheRequestTimeouts(t *testing.T) {
	const timeout = 200 * time.Millisecond
	a := startWith(t, agent.Config{HTTPLimits: agent.HTTPLimits{ReadTimeout: timeout, WriteTimeout: timeout}, VolumeOperationTimeout: timeout / 2})
	c := unixClient(t, a)
	c.Timeout = 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://plugvisor/v1/events", nil)
	require.NoError(t, err)
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	// Let both timeouts pass several times over: they bound one request,
	// and must not end a stream.
	time.Sleep(5 * timeout)
	require.NoError(t, a.Registry().RegisterPlugin(&messages.PluginInfo{Type: "csi-node", Name: "p", AllocId: "a1",
		Connection: &messages.ConnectionInfo{SocketPath: "/run/csi/p.sock"}}))
	lines := bufio.NewScanner(resp.Body)
	require.True(t, lines.Scan(), "the stream is still open: %v", lines.Err())
	var ev api.Event
	require.NoError(t, json.Unmarshal(lines.Bytes(), &ev))
	require.Equal(t, "registered", ev.Kind)
}
