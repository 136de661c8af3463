package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// startVolumePlugin runs the reference Docker volume plugin in dir's
// watched socket directory, until the test ends.
func startVolumePlugin(t *testing.T, dir string) {
	t.Helper()
	plugin := exec.Command(binary, "docker-volume-plugin",
		"-socket", filepath.Join(dir, "plugins", "local.sock"), "-root", filepath.Join(dir, "vols"))
	require.NoError(t, plugin.Start())
	exited := make(chan struct{})
	go func() { _ = plugin.Wait(); close(exited) }()
	t.Cleanup(func() { _ = plugin.Process.Kill(); <-exited })
}

// ok runs a CLI command that must succeed, and returns its output.
func ok(t *testing.T, args ...string) string {
	t.Helper()
	stdout, stderr, code := cli(t, args...)
	require.Equal(t, 0, code, "plugvisor %s: %s", strings.Join(args, " "), stderr)
	return stdout
}

func TestDockerVolumesThroughTheCLISurviveAnAgentRestart(t *testing.T) {
	dir := dataDir(t)
	agent := startAgent(t, dir, "-fingerprint-interval", "200ms")
	startVolumePlugin(t, dir)
	require.Eventually(t, func() bool { return len(pluginNames(t, dir, "docker-volume")) == 1 },
		settle, 50*time.Millisecond, "the plugin was not discovered")

	_, stderr, code := cli(t, "volume", "register", "-id", "x", "-plugin", "local", "-access-mode", "single-node-writer", "-data-dir", dir)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "is a Docker volume plugin", "no CSI volume is made on a Docker plugin")
	var health struct {
		DockerInstances  struct{ Healthy, Total int } `json:"docker_instances"`
		DiscoveredStates map[string]int               `json:"discovered_states"`
	}
	require.Eventually(t, func() bool {
		getJSON(t, apiClient(dir), "/v1/health", &health)
		return health.DockerInstances.Healthy == 1 && health.DockerInstances.Total == 1
	}, settle, 50*time.Millisecond, "health: %+v", health)
	require.Equal(t, 1, health.DiscoveredStates["registered"])
	require.Equal(t, 1, health.DiscoveredStates["healthy"])
	require.Equal(t, 0, health.DiscoveredStates["failed"])

	// Flags after the positional arguments are accepted.
	require.Contains(t, ok(t, "plugin", "status", "docker-volume", "local", "-data-dir", dir), "local")
	out := ok(t, "docker", "volume", "create", "data", "-driver", "local", "-data-dir", dir)
	require.Contains(t, out, "created volume data on driver local")
	out = ok(t, "docker", "volume", "mount", "data", "c1", "-data-dir", dir)
	mountpoint := filepath.Join(dir, "vols", "data")
	require.Contains(t, out, "at "+mountpoint)
	ok(t, "docker", "volume", "mount", "-data-dir", dir, "data", "c2")
	require.NoError(t, os.WriteFile(filepath.Join(mountpoint, "kept"), []byte("x"), 0o644))

	agent.stop(t)
	startAgent(t, dir, "-fingerprint-interval", "200ms")

	_, stderr, code = cli(t, "docker", "volume", "rm", "data", "-data-dir", dir)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "volume is in use", "the restarted agent knows its mounts")
	var info struct {
		Mounts map[string]int `json:"mounts"`
	}
	require.NoError(t, json.Unmarshal([]byte(ok(t, "docker", "volume", "inspect", "-json", "data", "-data-dir", dir)), &info))
	require.Equal(t, map[string]int{"c1": 1, "c2": 1}, info.Mounts)

	ok(t, "docker", "volume", "unmount", "data", "c1", "-data-dir", dir)
	_, stderr, code = cli(t, "docker", "volume", "unmount", "data", "c1", "-data-dir", dir)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "not mounted by that ID")
	ok(t, "docker", "volume", "unmount", "data", "c2", "-data-dir", dir)
	require.Contains(t, ok(t, "docker", "volume", "ls", "-data-dir", dir), "data")
	require.Contains(t, ok(t, "docker", "plugins", "-data-dir", dir), "registered")
	ok(t, "docker", "volume", "rm", "data", "-data-dir", dir)
	_, err := os.Stat(mountpoint)
	require.ErrorIs(t, err, os.ErrNotExist)

	// As in dockerd: no name is an anonymous volume, no driver is local,
	// and rm -f of a volume that is not there is no error.
	require.Regexp(t, `created volume [0-9a-f]{64} on driver local\n  driver local, scope local`,
		ok(t, "docker", "volume", "create", "-data-dir", dir))
	ok(t, "docker", "volume", "rm", "-f", "nothere", "-data-dir", dir)
	_, stderr, code = cli(t, "docker", "volume", "rm", "nothere", "-data-dir", dir)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "no such volume")
}

func TestBadDockerVolumeCommandsSayWhatIsWrong(t *testing.T) {
	dir := dataDir(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a name with a separator", []string{"create", "-driver", "local", "a/b"}, "must not contain a path separator"},
		{"the name ..", []string{"inspect", ".."}, "must not contain \"..\""},
		{"an option without =", []string{"create", "-driver", "local", "-opt", "size", "db"}, "want KEY=VALUE"},
		{"an option twice", []string{"create", "-driver", "local", "-opt", "a=1", "-opt", "a=2", "db"}, "given twice"},
		{"a mount without an ID", []string{"mount", "db"}, "mount needs NAME ID"},
		{"a mount ID with a slash", []string{"mount", "db", "a/b"}, "path separator"},
		{"an unknown subcommand", []string{"attach", "db"}, "unknown subcommand"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := cli(t, append(append([]string{"docker", "volume"}, tc.args...), "-data-dir", dir)...)
			require.Equal(t, 2, code, stderr)
			require.Contains(t, stderr, tc.want)
		})
	}
	_, err := os.Stat(filepath.Join(dir, "state.db"))
	require.ErrorIs(t, err, os.ErrNotExist, "nothing reached an agent")
}
