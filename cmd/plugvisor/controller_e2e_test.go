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

func TestVolumesAndSnapshotsThroughTheControllerFromTheCLI(t *testing.T) {
	const secret = "cli-s3cr3t-value"
	dir := dataDir(t)
	agentProc := startAgent(t, dir, "-fingerprint-interval", "200ms")
	plugin := exec.Command(binary, "hostpath-csi", "-endpoint", dir+"/plugins/hp.sock", "-name", "hp",
		"-node-id", "n1", "-root", dir+"/hp", "-symlink-fallback")
	require.NoError(t, plugin.Start())
	t.Cleanup(func() { _ = plugin.Process.Signal(syscall.SIGTERM); _ = plugin.Wait() })
	secrets := filepath.Join(t.TempDir(), "secrets.json")
	require.NoError(t, os.WriteFile(secrets, []byte(`{"token": "`+secret+`"}`), 0o600))

	var outputs []string
	run := func(want int, args ...string) string {
		t.Helper()
		stdout, stderr, code := cli(t, append(args[:1:1], append([]string{args[1], "-data-dir", dir}, args[2:]...)...)...)
		outputs = append(outputs, stdout, stderr)
		require.Equal(t, want, code, "%v: %s%s", args, stdout, stderr)
		return stdout + stderr
	}
	create := []string{"volume", "create", "-plugin", "hp", "-access-mode", "single-node-writer", "-size", "1MiB", "-secrets-file", secrets, "db"}
	require.Eventually(t, func() bool {
		stdout, stderr, code := cli(t, append(create[:2:2], append([]string{"-data-dir", dir}, create[2:]...)...)...)
		outputs = append(outputs, stdout, stderr)
		return code == 0 && strings.Contains(stdout, "created volume default/db on plugin hp")
	}, settle, 100*time.Millisecond, "the plugin's controller never came up")
	require.Contains(t, run(0, create...), "1048576 bytes", "creating again finds the same volume")

	require.Contains(t, run(0, "volume", "expand", "-size", "2MiB", "db"), "expanded volume default/db to 2097152 bytes; the plugin asks for node expansion")
	var snap struct {
		SnapshotID string `json:"snapshot_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(run(0, "snapshot", "create", "-json", "db", "nightly")), &snap))
	require.NotEmpty(t, snap.SnapshotID)
	require.Contains(t, run(0, "snapshot", "list", "-volume", "db"), snap.SnapshotID)
	require.Contains(t, run(0, "volume", "create", "-plugin", "hp", "-access-mode", "single-node-writer", "-snapshot", snap.SnapshotID, "db2"),
		"created volume default/db2")
	require.Contains(t, run(0, "volume", "delete", "db2"), "deleted volume default/db2 on its plugin")
	require.Contains(t, run(0, "snapshot", "delete", "hp", snap.SnapshotID), "deleted snapshot")
	require.Contains(t, run(0, "snapshot", "list", "-plugin", "hp"), "no snapshots")

	// Bad input: a clear error, and nothing changes.
	require.Contains(t, run(2, "volume", "create", "-plugin", "hp", "-access-mode", "single-node-writer"), "create needs ID")
	require.Contains(t, run(2, "volume", "create", "-size", "lots", "x"), `"lots" is not a size`)
	require.Contains(t, run(2, "volume", "create", "-parameter", "novalue", "x"), "is not KEY=VALUE")
	require.Contains(t, run(2, "volume", "expand", "db"), "missing required flag -size")
	require.Contains(t, run(2, "volume", "create", "-plugin", "hp", "-access-mode", "nobody", "x"), `-access-mode "nobody": want one of`)
	require.Contains(t, run(2, "snapshot", "create", "db"), "create needs VOLUME NAME")
	require.Contains(t, run(0, "volume", "list"), "db")

	require.Contains(t, run(0, "volume", "register", "-id", "legacy", "-plugin", "hp", "-access-mode", "single-node-writer"), "legacy")
	require.Contains(t, run(0, "volume", "deregister", "legacy"), "deregistered volume default/legacy (left on its plugin)")
	require.Contains(t, run(2, "volume", "deregister"), "deregister needs ID, e.g. plugvisor volume deregister")

	// A batch, all or none.
	batch := filepath.Join(t.TempDir(), "volumes.json")
	writeBatch := func(modes ...string) {
		var items []string
		for i, mode := range modes {
			items = append(items, `{"id":"b`+string(rune('0'+i))+`","plugin_id":"hp","access_mode":"`+mode+`","attachment_mode":"file-system"}`)
		}
		require.NoError(t, os.WriteFile(batch, []byte("["+strings.Join(items, ",")+"]"), 0o600))
	}
	writeBatch("single-node-writer", "sometimes")
	require.Contains(t, run(1, "volume", "register", "-f", batch), `volumes[1] (volume "b1"): access_mode`)
	require.NotContains(t, run(0, "volume", "list"), "b0", "the refused batch registered nothing")
	writeBatch("single-node-writer", "multi-node-reader-only")
	require.Contains(t, run(0, "volume", "register", "-f", batch), "registered volume default/b1 on plugin hp")
	require.Contains(t, run(1, "volume", "deregister", "b0", "nope", "b1"), `volumes[1] (volume "nope")`)
	require.Contains(t, run(0, "volume", "list"), "b0", "the refused batch forgot nothing")
	require.Contains(t, run(0, "volume", "deregister", "b0", "b1"), "deregistered volume default/b1 (left on its plugin)")
	require.Contains(t, run(0, "volume", "delete", "db"), "deleted volume default/db on its plugin")
	require.Contains(t, run(0, "volume", "list"), "no volumes registered")
	for _, out := range outputs {
		require.NotContains(t, out, secret, "no CLI output shows a secret")
	}
	agentProc.stop(t)
	require.Contains(t, agentProc.stderr.String(), "volume created", "the agent logged at debug level")
	require.NotContains(t, agentProc.stderr.String(), secret, "the agent logs no secret")
}
