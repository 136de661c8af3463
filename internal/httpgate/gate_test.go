package httpgate_test

import (
	"context"
	"net"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/plugvisor/plugvisor/internal/httpgate"
)

// TestMain fails the package if a gate's goroutines outlive its Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// listen is a gate on a unix socket in t's temporary directory, closed
// when t ends.
func listen(t *testing.T, cfg httpgate.Config) *httpgate.Listener {
	t.Helper()
	l, err := net.Listen("unix", t.TempDir()+"/gate.sock")
	require.NoError(t, err)
	g := httpgate.New(l, cfg)
	t.Cleanup(func() { _ = g.Close() })
	return g
}

func TestOpenStreamRefusesBeyondMaxStreamsUntilOneIsReleased(t *testing.T) {
	g := listen(t, httpgate.Config{MaxConns: 4, MaxStreams: 2})
	first, ok := g.OpenStream()
	require.True(t, ok)
	_, ok = g.OpenStream()
	require.True(t, ok)
	_, ok = g.OpenStream()
	require.False(t, ok, "a third stream beyond MaxStreams 2")
	first()
	first() // a second release gives back nothing more
	_, ok = g.OpenStream()
	require.True(t, ok, "the released slot")
	_, ok = g.OpenStream()
	require.False(t, ok, "a release counts once")
}

func TestAGateServesHTTPAndStopsAcceptingOnClose(t *testing.T) {
	g := listen(t, httpgate.Config{MaxConns: 4, ReservedConns: 1, MaxConnsPerPeer: 2, MaxStreams: 1})
	srv := &http.Server{Handler: g.Handler(func(*http.Request) bool { return true },
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })),
		ConnContext: g.ConnContext, ConnState: g.ConnState}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(g) }()
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", g.Addr().String())
	}}}
	resp, err := client.Get("http://gate/")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_ = resp.Body.Close()
	client.CloseIdleConnections()
	require.NoError(t, srv.Close())
	require.ErrorIs(t, <-served, http.ErrServerClosed)
	_, err = g.Accept()
	require.ErrorIs(t, err, net.ErrClosed)
}
