package api_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/messages"
)

// servePlugin listens on a unix socket in dir, as a plugin process would,
// and accepts and closes every connection until stop; stop leaves the
// socket file in place when keepFile, as a killed process does.
func servePlugin(t *testing.T, path string, keepFile bool) (stop func()) {
	t.Helper()
	l, err := net.Listen("unix", path)
	require.NoError(t, err)
	l.(*net.UnixListener).SetUnlinkOnClose(!keepFile)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			_ = l.Close()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

// realAPI serves b's API on a real TCP listener with one token per right,
// and returns a function that sends a request with the token of right.
func realAPI(t *testing.T, b *backend) func(right, method, path, body string) answer {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	srv.Config.Handler = b.server.HandlerFor(api.Listener{Name: "http " + srv.Listener.Addr().String(), Port: port, Tokens: rightsTokens(t)})
	srv.Start()
	t.Cleanup(srv.Close)
	return func(right, method, path, body string) answer {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+rightTokens[right])
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return answer{status: resp.StatusCode, header: resp.Header, body: string(got)}
	}
}

// TestADeregistrationCannotSidestepTheForceRule is attack 2 of issue 39,
// through the real HTTP API: a plugins token deregisters the healthy
// current allocation of a plugin whose process still serves, then
// registers its own socket without force. The deregistration is refused
// with 409 naming the flag, so the registration is refused too, and the
// healthy allocation stays current.
func TestADeregistrationCannotSidestepTheForceRule(t *testing.T) {
	dir := hostpathtest.TempDir(t)
	b := newBackend(t)
	b.server.CSI = fakeCSI{{Type: "csi-node", Name: "p", AllocId: "a1", Healthy: true}}
	socket := filepath.Join(dir, "a1.sock")
	servePlugin(t, socket, false)
	require.NoError(t, b.registry.RegisterPlugin(&messages.PluginInfo{Type: "csi-node", Name: "p", AllocId: "a1",
		Connection: &messages.ConnectionInfo{SocketPath: socket}}))
	call := realAPI(t, b)

	got := call("plugins", "DELETE", "/v1/plugins/csi-node/p/a1", "")
	require.Equal(t, http.StatusConflict, got.status, got.body)
	require.Equal(t, "not deregistered: csi-node p: allocation a1 is its healthy current allocation, and its plugin still serves "+socket+".\n"+
		"Without it, the next registration would become current without force, and receive the volumes of the plugin, secrets included: "+
		"stop the plugin first, or send force=true (plugvisor plugin deregister -force)", got.error(t))
	got = call("plugins", "POST", "/v1/plugins", registerBody("p", "evil1"))
	require.Equal(t, http.StatusConflict, got.status, got.body)
	require.Contains(t, got.error(t), "served by healthy allocation a1")
	current, ok := b.registry.Snapshot().Current("csi-node", "p")
	require.True(t, ok)
	require.Equal(t, "a1", current.GetAllocId(), "the healthy allocation is still current")
	require.Len(t, b.registry.Snapshot().Allocations("csi-node", "p"), 1, "nothing was registered or deregistered")

	got = call("plugins", "DELETE", "/v1/plugins/csi-node/p/a1?force=maybe", "")
	require.Equal(t, http.StatusBadRequest, got.status, got.body)
	require.Contains(t, got.error(t), `force is "maybe"; want true or false`)
	got = call("volumes", "DELETE", "/v1/plugins/csi-node/p/a1?force=true", "")
	require.Equal(t, http.StatusForbidden, got.status, "force needs the plugins right too: %s", got.body)
	got = call("plugins", "DELETE", "/v1/plugins/csi-node/p/a1?force=true", "")
	require.Equal(t, http.StatusOK, got.status, got.body)
	require.Contains(t, b.logs.String(), "[WARN]  plugin deregistered: type=csi-node name=p alloc_id=a1 force=true by=token:plugins-token")
	_, ok = b.registry.Snapshot().Current("csi-node", "p")
	require.False(t, ok)
}

// TestDeregistrationsThatReplaceNoServingPluginNeedNoForce: an allocation
// that is not current, one not found healthy, and a healthy current one
// whose process is gone (its socket removed, or left behind with nothing
// listening) deregister without force, as an orchestrator that stopped
// the plugin does.
func TestDeregistrationsThatReplaceNoServingPluginNeedNoForce(t *testing.T) {
	dir := hostpathtest.TempDir(t)
	b := newBackend(t)
	var fingerprints fakeCSI
	register := func(name, alloc string, healthy bool) string {
		socket := filepath.Join(dir, name+"-"+alloc+".sock")
		require.NoError(t, b.registry.RegisterPlugin(&messages.PluginInfo{Type: "csi-node", Name: name, AllocId: alloc,
			Connection: &messages.ConnectionInfo{SocketPath: socket}}))
		fingerprints = append(fingerprints, &messages.CSIFingerprint{Type: "csi-node", Name: name, AllocId: alloc, Healthy: healthy})
		return socket
	}
	servePlugin(t, register("old", "a0", true), false)
	servePlugin(t, register("old", "a1", true), false)
	servePlugin(t, register("sick", "a1", false), false)
	removed := servePlugin(t, register("removed", "a1", true), false)
	stale := servePlugin(t, register("stale", "a1", true), true)
	b.server.CSI = fingerprints
	removed()
	stale()
	call := realAPI(t, b)
	for _, tc := range []struct{ name, path, current string }{
		{"an allocation that is not current", "/v1/plugins/csi-node/old/a0", `"alloc_id": "a1"`},
		{"an allocation not found healthy", "/v1/plugins/csi-node/sick/a1", `"current": null`},
		{"a healthy allocation whose socket is gone", "/v1/plugins/csi-node/removed/a1", `"current": null`},
		{"a healthy allocation whose socket nobody serves", "/v1/plugins/csi-node/stale/a1", `"current": null`},
	} {
		got := call("plugins", "DELETE", tc.path, "")
		require.Equal(t, http.StatusOK, got.status, "%s: %s", tc.name, got.body)
		require.Contains(t, got.body, tc.current, tc.name)
	}
	require.Equal(t, http.StatusConflict, call("plugins", "DELETE", "/v1/plugins/csi-node/old/a1", "").status,
		"the healthy current allocation that serves still needs force")
}
