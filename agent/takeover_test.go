package agent_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/messages"
)

// TestAMountRightAfterATakeoverIsNotRefused: a newer allocation of a node
// plugin registered while the old one still serves, then a mount at once,
// twenty times over. The old instance's final fingerprint must not leave
// the node without a healthy instance of the plugin before the new
// instance's first arrives: no mount may be refused as not schedulable.
func TestAMountRightAfterATakeoverIsNotRefused(t *testing.T) {
	dir := dataDir(t)
	a := startAgent(t, dir)
	t.Cleanup(func() { require.NoError(t, a.Shutdown(context.Background())) })
	plugin := hostpathtest.Serve(t, hostpath.Config{Name: "hp", NodeID: "n1", Root: filepath.Join(dir, "hp"),
		Mode: hostpath.ModeMonolith, SymlinkFallback: true})
	// The same plugin on a second socket: each allocation has its own, and
	// both serve all along. Serve returns when the driver stops.
	second, err := plugin.Driver.Listen(filepath.Join(hostpathtest.TempDir(t), "csi.sock"))
	require.NoError(t, err)
	go func() { _ = plugin.Driver.Serve(second) }()
	sockets := []string{plugin.Endpoint, second.Addr().String()}

	register := func(ptype, alloc, socket string) {
		require.NoError(t, a.Registry().RegisterPlugin(&messages.PluginInfo{Type: ptype, Name: "hp", AllocId: alloc,
			Connection: &messages.ConnectionInfo{SocketPath: socket}}))
	}
	register(csi.TypeController, "a0", sockets[0])
	register(csi.TypeNode, "a0", sockets[0])
	vol := createVolume(t, a, plugin.Endpoint)

	ctx := context.Background()
	for i := 1; i <= 20; i++ {
		register(csi.TypeNode, fmt.Sprint("a", i), sockets[i%2])
		alloc := fmt.Sprint("web-", i)
		_, err := a.Volumes().Mount(ctx, vol.Namespace, vol.ID, alloc, false)
		require.NoError(t, err, "the mount right after takeover %d", i)
		require.NoError(t, a.Volumes().Unmount(ctx, vol.Namespace, vol.ID, alloc))
		// The next takeover from a healthy instance: wait for this one's.
		require.Eventually(t, func() bool {
			for _, fp := range a.CSI().Plugins() {
				if fp.GetType() == csi.TypeNode && fp.GetAllocId() == fmt.Sprint("a", i) {
					return fp.GetHealthy()
				}
			}
			return false
		}, 10*time.Second, 5*time.Millisecond)
	}
}
