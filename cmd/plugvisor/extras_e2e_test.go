package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// hostpathCLI starts an agent and the reference plugin "hp" as processes,
// and returns the agent's data dir and a run that checks a CLI command's
// exit code and returns its output.
func hostpathCLI(t *testing.T) (dir string, run func(want int, args ...string) string) {
	dir = dataDir(t)
	startAgent(t, dir, "-fingerprint-interval", "200ms")
	plugin := exec.Command(binary, "hostpath-csi", "-endpoint", dir+"/plugins/hp.sock", "-name", "hp",
		"-node-id", "n1", "-root", dir+"/hp", "-symlink-fallback")
	require.NoError(t, plugin.Start())
	t.Cleanup(func() { _ = plugin.Process.Signal(syscall.SIGTERM); _ = plugin.Wait() })
	run = func(want int, args ...string) string {
		t.Helper()
		stdout, stderr, code := cli(t, append(args[:2:2], append([]string{"-data-dir", dir}, args[2:]...)...)...)
		require.Equal(t, want, code, "%v: %s%s", args, stdout, stderr)
		return stdout + stderr
	}
	require.Eventually(t, func() bool {
		_, _, code := cli(t, "plugin", "capacity", "-data-dir", dir, "hp")
		return code == 0
	}, settle, 100*time.Millisecond, "the plugin's controller never came up")
	return dir, run
}

// TestCloneCapacityAndModifyFromTheCLI: plugin capacity answers the
// reference plugin's room; volume create -clone-from makes a copy of a
// volume's files; a clone of an unknown volume is refused naming
// clone_from; volume modify sets the plugin's mutable parameters, which
// volume status shows from the catalog, and an unknown key is refused by
// the plugin, changing nothing.
func TestCloneCapacityAndModifyFromTheCLI(t *testing.T) {
	dir, run := hostpathCLI(t)
	require.Regexp(t, `plugin hp: [1-9][0-9]* bytes available, largest volume`, run(0, "plugin", "capacity", "-capability", "access=single-node-writer", "hp"))
	var capacity struct {
		AvailableBytes int64 `json:"available_bytes"`
	}
	require.NoError(t, json.Unmarshal([]byte(run(0, "plugin", "capacity", "-json", "-capability", "access=multi-node-multi-writer", "hp")), &capacity))
	require.Zero(t, capacity.AvailableBytes, "the reference plugin makes no multi-node volume")
	require.Contains(t, run(2, "plugin", "capacity", "-parameter", "=x", "hp"), `"=x" is not KEY=VALUE`)

	out := run(0, "volume", "create", "-json", "-plugin", "hp", "-access-mode", "single-node-writer", "-size", "1MiB", "db")
	var db struct {
		ExternalID string `json:"external_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &db))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "hp", "volumes", db.ExternalID, "data"), []byte("hello"), 0o644))
	out = run(0, "volume", "create", "-json", "-plugin", "hp", "-access-mode", "single-node-writer", "-clone-from", "db", "db-copy")
	var clone struct {
		ExternalID string `json:"external_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &clone))
	data, err := os.ReadFile(filepath.Join(dir, "hp", "volumes", clone.ExternalID, "data"))
	require.NoError(t, err)
	require.Equal(t, "hello", string(data))
	require.Contains(t, run(1, "volume", "create", "-plugin", "hp", "-access-mode", "single-node-writer", "-clone-from", "nope", "x"), "clone_from")

	require.Contains(t, run(0, "volume", "modify", "-param", "tier=fast", "-param", "label=nightly", "db"), "modified volume default/db: 2 mutable parameters set")
	require.Contains(t, run(1, "volume", "modify", "-param", "iops=5000", "db"), `unknown mutable parameter "iops"`)
	var rec struct {
		MutableParameters map[string]string `json:"mutable_parameters"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "hp", "state", "volumes", db.ExternalID+".json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &rec))
	require.Equal(t, map[string]string{"tier": "fast", "label": "nightly"}, rec.MutableParameters, "the refused modify changed nothing")
	require.Contains(t, run(0, "volume", "status", "db"), "mutable parameters: label=nightly, tier=fast", "the catalog recorded what the plugin took, and only that")
	require.False(t, strings.Contains(run(0, "volume", "list"), " x "), "nothing was created")
}
