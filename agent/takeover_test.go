package agent_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/messages"
)

// takeoverFixture is an agent with the hostpath plugin hp served by one
// driver on two sockets, so that two allocations of it serve all along,
// registered (controller and node) as alloc a0 on the first (serveHP), and
// a volume of it.
type takeoverFixture struct {
	a       *agent.Agent
	sockets []string
	vol     *model.CSIVolume
}

func startTakeover(t testing.TB) *takeoverFixture {
	t.Helper()
	dir := dataDir(t)
	f := &takeoverFixture{a: startAgent(t, dir)}
	t.Cleanup(func() { require.NoError(t, f.a.Shutdown(context.Background())) })
	plugin := serveHP(t, f.a, dir, "a0")
	second, err := plugin.Driver.Listen(filepath.Join(hostpathtest.TempDir(t), "csi.sock"))
	require.NoError(t, err)
	go func() { _ = plugin.Driver.Serve(second) }() // returns when the driver stops
	f.sockets = []string{plugin.Endpoint, second.Addr().String()}
	f.vol = createVolume(t, f.a, plugin.Endpoint)
	return f
}

// register registers alloc of hp as ptype, on socket.
func (f *takeoverFixture) register(ptype, alloc, socket string) error {
	return f.a.Registry().RegisterPlugin(&messages.PluginInfo{Type: ptype, Name: "hp", AllocId: alloc,
		Connection: &messages.ConnectionInfo{SocketPath: socket}})
}

// awaitHealthy waits until alloc's node instance of hp is listed healthy.
func (f *takeoverFixture) awaitHealthy(t testing.TB, alloc string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, fp := range f.a.CSI().Plugins() {
			if fp.GetType() == csi.TypeNode && fp.GetAllocId() == alloc {
				return fp.GetHealthy()
			}
		}
		return false
	}, 10*time.Second, time.Millisecond)
}

// TestAMountRightAfterATakeoverIsNotRefused: a newer allocation of a node
// plugin registered while the old one still serves, then a mount at once,
// twenty times over. The old instance's final fingerprint must not leave
// the node without a healthy instance of the plugin before the new
// instance's first arrives: no mount may be refused as not schedulable.
func TestAMountRightAfterATakeoverIsNotRefused(t *testing.T) {
	f := startTakeover(t)
	ctx := context.Background()
	for i := 1; i <= 20; i++ {
		require.NoError(t, f.register(csi.TypeNode, fmt.Sprint("a", i), f.sockets[i%2]))
		alloc := fmt.Sprint("web-", i)
		_, err := f.a.Volumes().Mount(ctx, f.vol.Namespace, f.vol.ID, alloc, false)
		require.NoError(t, err, "the mount right after takeover %d", i)
		require.NoError(t, f.a.Volumes().Unmount(ctx, f.vol.Namespace, f.vol.ID, alloc))
		f.awaitHealthy(t, fmt.Sprint("a", i)) // the next takeover is from a healthy instance
	}
}
