package main

import (
	"encoding/json"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

// TestControllerOperationsThroughAnyNodeOfTheFleetRunWhereTheControllerRuns
// is issue 41's fifth recipe with real processes: three agents in one
// fleet, and the reference plugin beside n1 only, so that only n1 runs its
// controller. Create, expand, modify, snapshots, a restore, a clone,
// capacity and delete, sent through n2 and n3, run on n1's controller, and
// their refusals are n1's, word for word; a plugin no node runs is
// refused saying so.
func TestControllerOperationsThroughAnyNodeOfTheFleetRunWhereTheControllerRuns(t *testing.T) {
	srv := etcdtest.Start(t) // this process starts no protoactor remote: the agents run in children
	dirs := map[string]string{}
	for _, node := range []string{"n1", "n2", "n3"} {
		dirs[node] = dataDir(t)
		startAgent(t, dirs[node], "-node-id", node, "-fingerprint-interval", "200ms", "-cluster-etcd", srv.Endpoints()[0],
			"-cluster-address", "127.0.0.1:0", "-cluster-insecure", "-cluster-lease-ttl", "2s")
	}
	plugin := exec.Command(binary, "hostpath-csi", "-endpoint", dirs["n1"]+"/plugins/hp.sock", "-name", "hp",
		"-node-id", "n1", "-root", dirs["n1"]+"/hp", "-symlink-fallback")
	require.NoError(t, plugin.Start())
	t.Cleanup(func() { _ = plugin.Process.Signal(syscall.SIGTERM); _ = plugin.Wait() })
	on := func(node string, want int, args ...string) string {
		t.Helper()
		stdout, stderr, code := cli(t, append(args[:2:2], append([]string{"-data-dir", dirs[node]}, args[2:]...)...)...)
		require.Equal(t, want, code, "%s: %v: %s%s", node, args, stdout, stderr)
		return stdout + stderr
	}
	require.Eventually(t, func() bool {
		out, _, code := cli(t, "plugin", "status", "-data-dir", dirs["n2"], "hp")
		return code == 0 && strings.Contains(out, "Controllers Healthy  = 1")
	}, settle, 100*time.Millisecond, "the fleet never counted n1's controller of hp")

	require.Contains(t, on("n2", 0, "volume", "create", "-plugin", "hp", "-access-mode", "single-node-writer", "-size", "1MiB", "db"),
		"created volume default/db on plugin hp")
	require.Contains(t, on("n3", 0, "volume", "expand", "-size", "2MiB", "db"), "expanded volume default/db to 2097152 bytes")
	require.Contains(t, on("n2", 0, "volume", "modify", "-param", "tier=fast", "db"), "modified volume default/db")
	var snap struct {
		SnapshotID string `json:"snapshot_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(on("n3", 0, "snapshot", "create", "-json", "db", "nightly")), &snap))
	require.Contains(t, on("n2", 0, "snapshot", "list", "-volume", "db"), snap.SnapshotID)
	require.Contains(t, on("n2", 0, "volume", "create", "-plugin", "hp", "-access-mode", "single-node-writer", "-snapshot", snap.SnapshotID, "restored"),
		"2097152 bytes", "a restore without a size takes the snapshot's")
	require.Contains(t, on("n3", 0, "volume", "create", "-plugin", "hp", "-access-mode", "single-node-writer", "-clone-from", "db", "copy"),
		"2097152 bytes", "a clone without a size takes its source's")
	require.Regexp(t, `plugin hp: [1-9][0-9]* bytes available`, on("n3", 0, "plugin", "capacity", "hp"))

	// The same refusal, word for word, through n2 as on n1 itself.
	small := []string{"volume", "create", "-plugin", "hp", "-access-mode", "single-node-writer", "-clone-from", "db", "-size", "1MiB", "small"}
	there := on("n1", 1, small...)
	require.Contains(t, there, "capacity.required_bytes 1048576 is less than the 2097152 bytes of source volume default/db")
	require.Equal(t, there, on("n2", 1, small...))
	require.Contains(t, on("n3", 1, "volume", "create", "-plugin", "nope", "-access-mode", "single-node-writer", "x"),
		`no other live node of the fleet runs a healthy controller of plugin "nope"`)

	require.Contains(t, on("n3", 0, "snapshot", "delete", "hp", snap.SnapshotID), "deleted snapshot")
	for node, id := range map[string]string{"n2": "restored", "n3": "copy"} {
		require.Contains(t, on(node, 0, "volume", "delete", id), "deleted volume default/"+id+" on its plugin")
	}
	require.Contains(t, on("n2", 0, "volume", "delete", "db"), "deleted volume default/db on its plugin")
	require.Contains(t, on("n1", 0, "snapshot", "list", "-plugin", "hp"), "no snapshots")
}
