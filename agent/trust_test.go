package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/messages"
)

// TestADataDirOthersCanWriteIsRefusedAtStart: a data dir its group or
// others can write is refused, with the remedy, before anything is made in
// it; once it is the owner's alone, the agent starts.
func TestADataDirOthersCanWriteIsRefusedAtStart(t *testing.T) {
	dir := dataDir(t)
	for _, mode := range []os.FileMode{0o777, 0o770, 0o702} {
		require.NoError(t, os.Chmod(dir, mode))
		_, err := agent.Start(agent.Config{DataDir: dir, Logger: probe.Logger(t), NodeID: "n1"})
		require.ErrorIs(t, err, agent.ErrInvalidConfig, "mode %04o", mode)
		require.ErrorContains(t, err, "its group or others can write it")
		require.ErrorContains(t, err, "chmod go-w "+dir)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Empty(t, entries, "mode %04o: nothing was made in it", mode)
	}
	require.NoError(t, os.Chmod(dir, 0o750))
	a, err := agent.Start(agent.Config{DataDir: dir, Logger: probe.Logger(t), NodeID: "n1"})
	require.NoError(t, err)
	require.NoError(t, a.Shutdown(context.Background()))
}

// TestASocketOfAnotherUserInAnOpenPluginDirIsNotRegistered is attack 5 of
// issue 39: in an extra -plugin-dir that anyone can write, a CSI plugin's
// socket owned by uid 65534 is refused, and discovery says why; a plugin
// of root's beside it is registered.
func TestASocketOfAnotherUserInAnOpenPluginDirIsNotRegistered(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it chowns a socket to another user")
	}
	dir := dataDir(t)
	open := hostpathtest.TempDir(t)
	require.NoError(t, os.Chmod(open, 0o777))
	serve := func(name string) string {
		p := hostpathtest.Serve(t, hostpath.Config{Name: name, NodeID: "n1", Root: filepath.Join(dir, name),
			Mode: hostpath.ModeMonolith, SymlinkFallback: true})
		return p.Endpoint
	}
	evil := serve("evil")
	require.NoError(t, os.Lchown(evil, 65534, 65534))
	require.NoError(t, os.Rename(evil, filepath.Join(open, "evil.sock")))
	require.NoError(t, os.Rename(serve("good"), filepath.Join(open, "good.sock")))
	a, err := agent.Start(agent.Config{DataDir: dir, Logger: probe.Logger(t), NodeID: "n1", SocketDirs: []string{open},
		FingerprintInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Shutdown(context.Background())) })

	waitHealthy(t, a, "good")
	var state *messages.DiscoveredPlugin
	require.Eventually(t, func() bool {
		for _, p := range a.Plugins() {
			if p.GetName() == "evil" {
				state = p
			}
		}
		return state != nil
	}, time.Minute, 10*time.Millisecond)
	require.Equal(t, messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_INVALID, state.GetState())
	require.True(t, strings.HasPrefix(state.GetError(), `untrusted plugin file: plugin "evil" (`+open+`/evil.sock): it is owned by uid 65534`), state.GetError())
	for _, ptype := range []string{csi.TypeNode, csi.TypeController} {
		_, ok := a.Registry().Snapshot().Current(ptype, "evil")
		require.False(t, ok, "%s evil is not registered", ptype)
	}
}
