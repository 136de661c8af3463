package api_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/csi/controller"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
)

// tokenListener is a TCP listener with one token per right (rightTokens).
func tokenListener(t *testing.T) api.Listener {
	return api.Listener{Name: "http 127.0.0.1:4646", Port: "4646", Tokens: rightsTokens(t)}
}

// TestARegistrationNeverTakesOverAHealthyPluginSilently registers over a
// healthy current allocation through the API: only the plugins right may,
// and only with force; each refusal names why and the remedy and leaves
// the current allocation as it was.
func TestARegistrationNeverTakesOverAHealthyPluginSilently(t *testing.T) {
	b := newBackend(t)
	b.server.CSI = fakeCSI{{Type: "csi-node", Name: "p", AllocId: "a1", Healthy: true}, {Type: "csi-node", Name: "sick", AllocId: "a1"}}
	run(t, b, []step{
		{name: "a healthy plugin", method: "POST", path: "/v1/plugins", body: registerBody("p", "a1"), status: 200, want: `"registered_by": "addr:192.0.2.1:1234"`},
		{name: "a plugin not found healthy", method: "POST", path: "/v1/plugins", body: registerBody("sick", "a1"), status: 200},
	})
	events := followEvents(t, b, "?type=csi-node")
	h := b.server.HandlerFor(tokenListener(t))
	takeover := registerBody("p", "evil1")
	forced := `{"type":"csi-node","name":"p","alloc_id":"evil1","connection":{"socket_path":"/run/csi/evil1.sock"},"force":true}`
	cases := []struct {
		name, right, body string
		status            int
		want, current     string
	}{
		{"no token", "", forced, 401, "needs an ACL token", "a1"},
		{"a read token", "read", forced, 403, `"read-token" has the rights read; POST /v1/plugins needs the plugins right`, "a1"},
		{"a volumes token, forced too", "volumes", forced, 403, `"volumes-token" has the rights read,volumes; POST /v1/plugins needs the plugins right`, "a1"},
		{"a plugins token without force", "plugins", takeover, 409,
			"csi-node p is served by healthy allocation a1 (/run/csi/a1.sock); evil1 would replace it as current.\n" +
				`Its socket would receive the volumes of the plugin, secrets included: deregister a1 first, or send "force": true (plugvisor plugin register -force)`, "a1"},
		{"an admin token without force", "admin", takeover, 409, "served by healthy allocation a1", "a1"},
		{"the current allocation again, in place", "plugins", registerBody("p", "a1"), 200, `"registered_by": "token:plugins-token"`, "a1"},
		{"over a plugin not found healthy", "plugins", registerBody("sick", "a2"), 200, `"alloc_id": "a2"`, "a1"},
		{"a plugins token with force", "plugins", forced, 200, `"registered_by": "token:plugins-token"`, "evil1"},
	}
	for _, tc := range cases {
		header := map[string]string{"Content-Type": "application/json"}
		if tc.right != "" {
			header["Authorization"] = "Bearer " + rightTokens[tc.right]
		}
		got := serve(t, h, request{method: "POST", path: "/v1/plugins", body: tc.body, host: "127.0.0.1:4646", header: header})
		require.Equal(t, tc.status, got.status, "%s: %s", tc.name, got.body)
		if got.status == 200 {
			require.Contains(t, got.body, tc.want, tc.name)
		} else {
			require.Contains(t, got.error(t), tc.want, tc.name)
		}
		current, ok := b.registry.Snapshot().Current("csi-node", "p")
		require.True(t, ok)
		require.Equal(t, tc.current, current.GetAllocId(), "%s: the current allocation", tc.name)
	}
	current, _ := b.registry.Snapshot().Current("csi-node", "p")
	require.Equal(t, "token:plugins-token", current.GetRegisteredBy(), "the registration records who made it")
	require.Contains(t, b.logs.String(), "plugin registered: type=csi-node name=p alloc_id=evil1 socket=/run/csi/evil1.sock previous=a1 force=true by=token:plugins-token")
	line := events(t)
	for !strings.Contains(string(line), `"evil1"`) {
		line = events(t)
	}
	require.Contains(t, string(line), `"registered_by":"token:plugins-token"`, "the event names who registered")
	for _, token := range rightTokens {
		require.NotContains(t, b.logs.String(), token, "logs name tokens, never their secrets")
	}
}

// TestAVolumesTokenCannotSendAVolumesSecretsToItsOwnSocket is attack 1 of
// issue 23: a caller who may mount volumes registers its own socket as the
// node plugin of a volume with secrets, then mounts it. The attacker's
// socket must receive nothing, and the mount goes to the real plugin.
func TestAVolumesTokenCannotSendAVolumesSecretsToItsOwnSocket(t *testing.T) {
	dir := hostpathtest.TempDir(t)
	b, a := newCSIBackend(t, dir)
	serveHostpath(t, b, a, dir)
	ctl, err := controller.New(controller.Config{Catalog: a.catalog, Plugins: b.registry, NodeExpander: a.volumes,
		OperationTimeout: 30 * time.Second})
	require.NoError(t, err)
	b.server.Controller = ctl
	h := b.server.HandlerFor(tokenListener(t))
	volumes := func(method, path, body string) answer {
		return serve(t, h, request{method: method, path: path, body: body, host: "127.0.0.1:4646",
			header: map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + rightTokens["volumes"]}})
	}

	evil := filepath.Join(dir, "evil.sock")
	listener, err := net.Listen("unix", evil)
	require.NoError(t, err)
	var received atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := listener.Accept()
			if err != nil {
				return
			}
			received.Add(1)
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = listener.Close(); <-done })

	got := volumes("POST", "/v1/volumes/default/db/create", `{"plugin_id":"hp","access_mode":"single-node-writer",`+
		`"secrets":{"token":"`+secretValue+`"}}`)
	require.Equal(t, 201, got.status, got.body)
	takeover := volumes("POST", "/v1/plugins", `{"type":"csi-node","name":"hp","alloc_id":"evil1","connection":{"socket_path":"`+evil+`"},"force":true}`)

	require.Eventually(t, func() bool {
		v, err := a.catalog.GetVolume(context.Background(), "default", "db")
		return err == nil && v.Schedulable
	}, 20*time.Second, 20*time.Millisecond)
	got = volumes("POST", "/v1/volumes/default/db/mount", `{"alloc_id":"web-1"}`)
	require.Zero(t, received.Load(), "the attacker's socket received a connection")
	require.Equal(t, 200, got.status, got.body)
	require.Equal(t, 403, takeover.status, "the takeover is refused: %s", takeover.body)
	require.Contains(t, takeover.error(t), "needs the plugins right")
	current, _ := b.registry.Snapshot().Current("csi-node", "hp")
	require.Equal(t, "a1", current.GetAllocId())
	got = volumes("POST", "/v1/volumes/default/db/unmount", `{"alloc_id":"web-1"}`)
	require.Equal(t, 200, got.status, got.body)
	require.NotContains(t, b.logs.String(), secretValue)
}

// TestACertificateCallerIsNamedByItsCommonName: on a TLS listener without
// tokens, a registration records the client certificate's CN, quoted when
// it is not a plain name.
func TestACertificateCallerIsNamedByItsCommonName(t *testing.T) {
	for cn, want := range map[string]string{"ops-1": "cert:ops-1", "ops\nfake=1": `cert:"ops\nfake=1"`} {
		b := newBackend(t)
		req := httptest.NewRequest("POST", "https://127.0.0.1:4646/v1/plugins", strings.NewReader(registerBody("p", "a1")))
		req.Header.Set("Content-Type", "application/json")
		req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Subject: pkix.Name{CommonName: cn}}}}
		rec := httptest.NewRecorder()
		b.server.HandlerFor(api.Listener{Name: "https 127.0.0.1:4646", Port: "4646"}).ServeHTTP(rec, req)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		current, _ := b.registry.Snapshot().Current("csi-node", "p")
		require.Equal(t, want, current.GetRegisteredBy())
	}
}

// TestAUnixSocketCallerIsNamedByItsUID serves the API on a unix socket
// through PeerListener, as the agent does: a registration records the
// caller as the kernel names it, "unix:uid=<uid>".
func TestAUnixSocketCallerIsNamedByItsUID(t *testing.T) {
	b := newBackend(t)
	socket := filepath.Join(t.TempDir(), "api.sock")
	l, err := net.Listen("unix", socket)
	require.NoError(t, err)
	srv := &http.Server{Handler: b.server.HandlerFor(unixListener), ReadHeaderTimeout: time.Minute}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(api.PeerListener(l)) }()
	t.Cleanup(func() {
		require.NoError(t, srv.Close())
		require.ErrorIs(t, <-done, http.ErrServerClosed)
	})
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}}
	t.Cleanup(client.CloseIdleConnections)
	resp, err := client.Post("http://plugvisor/v1/plugins", "application/json", strings.NewReader(registerBody("p", "a1")))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	current, ok := b.registry.Snapshot().Current("csi-node", "p")
	require.True(t, ok)
	require.Equal(t, fmt.Sprintf("unix:uid=%d", os.Getuid()), current.GetRegisteredBy())
	require.Contains(t, b.logs.String(), fmt.Sprintf("by=unix:uid=%d", os.Getuid()))
}
