package api_test

import (
	"context"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
)

func TestCSIPluginsShowTheNewNodeIDOfAPluginRestartedOnItsSocket(t *testing.T) {
	dir := hostpathtest.TempDir(t)
	b, a := newCSIBackend(t, dir)
	plugin := serveHostpath(t, b, a, dir)
	got := serve(t, b.server.HandlerFor(unixListener), request{method: "GET", path: "/v1/csi/instances"})
	require.Contains(t, got.body, `"node_id": "n1"`)

	// The plugin restarts on the same socket as another node: no agent restart.
	plugin.Driver.Stop()
	d, err := hostpath.New(hostpath.Config{Name: "hp", NodeID: "n2", Root: filepath.Join(dir, "hp"),
		Mode: hostpath.ModeMonolith, Logger: hostpathtest.Logger(t)})
	require.NoError(t, err)
	l, err := d.Listen(plugin.Endpoint)
	require.NoError(t, err)
	serveUntilCleanup(t, l, d.Serve, d.Stop)

	require.Eventually(t, func() bool {
		got := serve(t, b.server.HandlerFor(unixListener), request{method: "GET", path: "/v1/csi/instances"})
		return strings.Contains(got.body, `"node_id": "n2"`) && !strings.Contains(got.body, `"node_id": "n1"`)
	}, 20*time.Second, 20*time.Millisecond, "/v1/csi/instances shows the restarted plugin's node ID")
}

// serveUntilCleanup serves l with serve until the test ends, then stops.
func serveUntilCleanup(t *testing.T, l net.Listener, serve func(net.Listener) error, stop func()) {
	served := make(chan error, 1)
	go func() { served <- serve(l) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-served)
	})
}

// rpcCounter counts the RPCs a plugin served, by volume ID.
type rpcCounter struct {
	// endpoint is the plugin's socket.
	endpoint string
	mu       sync.Mutex
	calls    map[string][]string // volume ID -> methods
}

func (c *rpcCounter) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if r, ok := req.(interface{ GetVolumeId() string }); ok {
		c.mu.Lock()
		c.calls[r.GetVolumeId()] = append(c.calls[r.GetVolumeId()], info.FullMethod)
		c.mu.Unlock()
	}
	return handler(ctx, req)
}

func (c *rpcCounter) of(volume string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls[volume])
}

// serveCountedHostpath serves a hostpath plugin "hp" with cfg's node ID and
// limit through a gRPC server that counts its RPCs, and registers it.
func serveCountedHostpath(t *testing.T, b *backend, a csiParts, dir string, cfg hostpath.Config) *rpcCounter {
	t.Helper()
	cfg.Name, cfg.Root, cfg.Mode, cfg.Logger = "hp", filepath.Join(dir, "hp"), hostpath.ModeMonolith, hostpathtest.Logger(t)
	d, err := hostpath.New(cfg)
	require.NoError(t, err)
	counter := &rpcCounter{calls: map[string][]string{}}
	server := grpc.NewServer(grpc.ChainUnaryInterceptor(counter.intercept))
	d.Register(server)
	l, err := d.Listen(filepath.Join(hostpathtest.TempDir(t), "csi.sock"))
	require.NoError(t, err)
	serveUntilCleanup(t, l, server.Serve, server.GracefulStop)
	counter.endpoint = l.Addr().String()
	registerHostpath(t, b, a, l.Addr().String())
	return counter
}

func TestAMountPastTheNodesVolumeLimitOrOutOfItsTopologyIsRefusedBeforeAnyRPC(t *testing.T) {
	dir := hostpathtest.TempDir(t)
	b, a := newCSIBackend(t, dir)
	counter := serveCountedHostpath(t, b, a, dir, hostpath.Config{NodeID: "n1", MaxVolumes: 1})
	register := func(id, topologies string) step {
		return step{name: "volume " + id, method: "POST", path: "/v1/volumes", status: 200, want: `"` + id + `"`,
			body: `{"id":"` + id + `","plugin_id":"hp","access_mode":"single-node-writer","attachment_mode":"file-system"` + topologies + `}`}
	}
	run(t, b, []step{register("one", ""), register("two", ""),
		register("far", `,"topologies":[{"`+hostpath.TopologyKey+`":"n2"}]`)})
	require.Eventually(t, func() bool {
		v, err := a.catalog.GetVolume(context.Background(), "default", "one")
		return err == nil && v.Schedulable
	}, 20*time.Second, 20*time.Millisecond)

	run(t, b, []step{
		{name: "a claim on this node", method: "POST", path: "/v1/volumes/default/one/claim", body: `{"alloc_id":"web-1"}`, status: 200, want: `"web-1"`},
		{name: "a mount past the limit", method: "POST", path: "/v1/volumes/default/two/mount", body: `{"alloc_id":"web-2"}`, status: 409,
			want: "node n1 holds 1 volumes of plugin hp (default/one), its limit (max_volumes_per_node from NodeGetInfo) is 1"},
		{name: "a mount out of the volume's topology", method: "POST", path: "/v1/volumes/default/far/mount", body: `{"alloc_id":"web-3"}`, status: 409,
			want: "volume default/far can be reached only from topology " + hostpath.TopologyKey + "=n2; node n1 (plugin node ID n1) stands at " + hostpath.TopologyKey + "=n1"},
	})
	require.Empty(t, counter.of("two"), "no RPC for the mount past the limit")
	require.Empty(t, counter.of("far"), "no RPC for the mount out of topology")
	for _, id := range []string{"two", "far"} {
		v, err := a.catalog.GetVolume(context.Background(), "default", id)
		require.NoError(t, err)
		require.Empty(t, v.WriteClaims, "the refused mount of %s left no claim", id)
	}
	run(t, b, []step{{name: "the claim's release", method: "POST", path: "/v1/volumes/default/one/release", body: `{"alloc_id":"web-1"}`, status: 200}})
	run(t, b, []step{{name: "a mount with room", method: "POST", path: "/v1/volumes/default/two/mount", body: `{"alloc_id":"web-2"}`, status: 404,
		want: "hostpath: volume two does not exist"}})
	require.NotEmpty(t, counter.of("two"), "once there is room, the mount reaches the plugin")
}
