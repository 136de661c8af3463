package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/csi/csitest"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
)

// healthOf asks the agent's API for its health, as JSON values.
func healthOf(t testing.TB, c *http.Client) map[string]any {
	t.Helper()
	status, body, err := call(c, "GET", "http://plugvisor/v1/health", "", "")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, body)
	var h map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &h))
	return h
}

func TestHealthIsOKWithNumbersWhenAllIsWell(t *testing.T) {
	a := startWith(t, agent.Config{})
	h := healthOf(t, unixClient(t, a))
	require.Equal(t, "ok", h["status"])
	require.Equal(t, []any{}, h["reasons"])
	require.Equal(t, float64(0), h["plugins"], "counts are JSON numbers")
	require.Equal(t, map[string]any{"healthy": float64(0), "total": float64(0)}, h["csi_instances"])
	require.Equal(t, float64(0), h["discovery_failures"])
}

func TestHealthIsDegradedWithTheReasons(t *testing.T) {
	a := startWith(t, agent.Config{FingerprintInterval: 50 * time.Millisecond})
	c := unixClient(t, a)
	require.NoError(t, os.WriteFile(filepath.Join(a.SpecDir(), "broken.spec"), []byte("ftp://nowhere\n"), 0o644))
	require.NoError(t, a.Registry().RegisterPlugin(&messages.PluginInfo{Type: "csi-node", Name: "gone", AllocId: "a1",
		Connection: &messages.ConnectionInfo{SocketPath: filepath.Join(a.DataDir(), "no-such.sock")}}))

	var h map[string]any
	require.Eventually(t, func() bool {
		h = healthOf(t, c)
		return len(h["reasons"].([]any)) == 2
	}, 20*time.Second, 20*time.Millisecond, "health never named both problems: %v", h)
	require.Equal(t, "degraded", h["status"])
	reasons := h["reasons"].([]any)
	require.True(t, strings.HasPrefix(reasons[0].(string), "1 CSI plugin instances are unhealthy: csi-node gone ("), reasons[0])
	require.True(t, strings.HasPrefix(reasons[1].(string), "1 discovered plugins failed: broken ("), reasons[1])
	require.Equal(t, float64(1), h["plugins"])
	require.Equal(t, map[string]any{"healthy": float64(0), "total": float64(1)}, h["csi_instances"])
	require.Equal(t, float64(1), h["discovery_failures"])
}

func TestHealthIsDegradedWhileTheStoreFailsWrites(t *testing.T) {
	dir := dataDir(t)
	// A small tmpfs as the data dir (the owner's alone: a tmpfs is 1777
	// unless told): filled up, it fails the store's writes.
	require.NoError(t, exec.Command("mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", dir).Run())
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	a, err := agent.Start(agent.Config{DataDir: dir, NodeID: "n1", Logger: probe.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
	c := unixClient(t, a)

	filler := filepath.Join(dir, "filler")
	out, _ := exec.Command("dd", "if=/dev/zero", "of="+filler, "bs=64k").CombinedOutput()
	require.Contains(t, string(out), "No space left", "the tmpfs is full")
	plugin := func(i int) *messages.PluginInfo {
		return &messages.PluginInfo{Type: "csi-node", Name: fmt.Sprintf("p%d", i), AllocId: "a1", Version: strings.Repeat("v", 200),
			Connection: &messages.ConnectionInfo{SocketPath: "/run/csi/p.sock"}}
	}
	// The store's file has room left in its pages: write until it needs more.
	for i := 0; err == nil; i++ {
		require.Less(t, i, 10_000, "the store never ran out of space")
		err = a.Registry().RegisterPlugin(plugin(i))
	}
	require.ErrorIs(t, err, registry.ErrStore)
	h := healthOf(t, c)
	require.Equal(t, "degraded", h["status"])
	require.Contains(t, h["reasons"].([]any)[0], "store: the latest durable write failed")

	require.NoError(t, os.Remove(filler))
	require.NoError(t, a.Registry().RegisterPlugin(plugin(-1)))
	// The registered plugins have no sockets, so their CSI instances may be
	// unhealthy by now: only the store's reason must be gone.
	for _, reason := range healthOf(t, c)["reasons"].([]any) {
		require.NotContains(t, reason, "store:", "a successful write clears it")
	}
}

// blockedIdentity is a plugin's identity service whose GetPluginInfo waits
// until release is closed: its instance's first fingerprint waits with it.
type blockedIdentity struct {
	csipb.UnimplementedIdentityServer
	release chan struct{}
}

func (b *blockedIdentity) GetPluginInfo(ctx context.Context, _ *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	select {
	case <-b.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &csipb.GetPluginInfoResponse{Name: "slow", VendorVersion: "1"}, nil
}

// TestHealthIsStartingUntilEveryRestoredInstanceHasFingerprinted: an agent
// restarted with a CSI plugin registered says "starting", naming the
// plugin, until that plugin's instance has fingerprinted once (or given
// up), not "ok" with no instance counted: a mount sent then would be
// refused as not schedulable.
func TestHealthIsStartingUntilEveryRestoredInstanceHasFingerprinted(t *testing.T) {
	dir := dataDir(t)
	socket := filepath.Join(hostpathtest.TempDir(t), "csi.sock")
	a := startAgent(t, dir)
	require.NoError(t, a.Registry().RegisterPlugin(&messages.PluginInfo{Type: "csi-node", Name: "slow", AllocId: "a1",
		Connection: &messages.ConnectionInfo{SocketPath: socket}}))
	require.NoError(t, a.Shutdown(context.Background()))

	identity := &blockedIdentity{release: make(chan struct{})}
	csitest.Serve(t, socket, csitest.Services{Identity: identity})
	released := false
	release := func() {
		if !released {
			released = true
			close(identity.release)
		}
	}
	t.Cleanup(release) // before the server's own cleanup waits for its handlers
	a = startAgent(t, dir)
	t.Cleanup(func() { require.NoError(t, a.Shutdown(context.Background())) })
	c := unixClient(t, a)

	h := healthOf(t, c)
	require.Equal(t, "starting", h["status"], "reasons: %v", h["reasons"])
	require.Contains(t, h["reasons"], "starting: 1 restored CSI plugin instances have not fingerprinted yet: csi-node slow (alloc a1)")

	release()
	require.Eventually(t, func() bool {
		h = healthOf(t, c)
		return h["status"] != "starting"
	}, 20*time.Second, 10*time.Millisecond, "still starting: %v", h)
	for _, reason := range h["reasons"].([]any) {
		require.NotContains(t, reason, "starting")
	}
}
