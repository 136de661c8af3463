package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/internal/errwalk"
)

// cliRefusal is a command the CLI refuses: its exit code and a phrase of
// its message.
type cliRefusal struct {
	name string
	args []string // the command and its subcommand first; -data-dir goes after them
	exit int
	want string
}

// TestTheCLIsRefusalsSayEachThingOnce walks the refusals of every command
// family against a running agent with the hostpath plugin: plugins,
// volumes and claims, mounts, the controller path (create, expand, modify,
// delete, snapshots, capacity), Docker volumes, nodes, and the CLI's own
// usage errors. Each exits 1 (2 for a usage error) with one line: the
// command path, the CLI's label, then a message that says each thing once
// (internal/errwalk). The agent answers none of them with a 500, the
// status of an error of no class.
func TestTheCLIsRefusalsSayEachThingOnce(t *testing.T) {
	dir := dataDir(t)
	agentProc := startAgent(t, dir, "-fingerprint-interval", "200ms")
	plugin := exec.Command(binary, "hostpath-csi", "-endpoint", dir+"/plugins/hp.sock", "-name", "hp",
		"-node-id", "n1", "-root", dir+"/hp", "-symlink-fallback")
	require.NoError(t, plugin.Start())
	t.Cleanup(func() { _ = plugin.Process.Signal(syscall.SIGTERM); _ = plugin.Wait() })
	run := func(args ...string) (string, int) {
		t.Helper()
		_, stderr, code := cli(t, append(args[:2:2], append([]string{"-data-dir", dir}, args[2:]...)...)...)
		return stderr, code
	}
	require.Eventually(t, func() bool {
		_, code := run("volume", "create", "-plugin", "hp", "-access-mode", "single-node-writer", "-size", "1MiB", "db")
		return code == 0
	}, settle, 100*time.Millisecond, "the plugin's controller never came up")
	require.Eventually(t, func() bool {
		_, code := run("volume", "claim", "db", "a1")
		return code == 0
	}, settle, 100*time.Millisecond, "the plugin's node never became healthy")
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))

	cases := []cliRefusal{
		{"a socket path that is a file", []string{"plugin", "register", "-type", "csi-node", "-name", "p", "-alloc", "a1", "-socket", file},
			1, "invalid argument: socket path"},
		{"a plugin name with a separator", []string{"plugin", "register", "-type", "csi-node", "-name", "a/b", "-alloc", "a1",
			"-socket", "/run/x.sock"}, 1, "path separator"},
		{"an unknown allocation", []string{"plugin", "deregister", "csi-node", "q", "a1"}, 1, "not found"},
		{"an unknown plugin", []string{"plugin", "status", "csi-node", "q"}, 1, "not found"},
		{"an unknown CSI plugin", []string{"plugin", "status", "nope"}, 1, "plugin not found"},
		{"a negative expectation", []string{"plugin", "expect", "nope", "-nodes", "-1"}, 1, "nodes is -1"},
		{"the capacity of no controller", []string{"plugin", "capacity", "nope"}, 1, "no controller plugin"},

		{"the status of an unknown volume", []string{"volume", "status", "v1"}, 1, "volume not found"},
		{"a volume with an unknown access mode", []string{"volume", "register", "-id", "v2", "-plugin", "hp", "-access-mode", "bogus"},
			2, `-access-mode "bogus": want one of single-node-reader-only`},
		{"a volume ID with a separator", []string{"volume", "register", "-id", "a/b", "-plugin", "hp", "-access-mode", "single-node-writer"},
			1, "path separator"},
		{"a deregistration of an unknown volume", []string{"volume", "deregister", "nope"}, 1, "volume not found"},
		{"a deregistration of a claimed volume", []string{"volume", "deregister", "db"}, 1, "volume in use"},
		{"a claim of an unknown volume", []string{"volume", "claim", "v1", "a1"}, 1, "volume not found"},
		{"a second writer's claim", []string{"volume", "claim", "db", "a2"}, 1, "already has a writer"},
		{"a release of an unknown volume", []string{"volume", "release", "nope", "a1"}, 1, "volume not found"},
		{"a mount of an unknown volume", []string{"volume", "mount", "v1", "a1"}, 1, "volume not found"},
		{"an unmount of a volume not mounted", []string{"volume", "unmount", "nope", "a1"}, 1, "not mounted"},
		{"a detach of an unknown volume", []string{"volume", "detach", "nope", "n1"}, 1, "volume not found"},

		{"a create without a controller", []string{"volume", "create", "-plugin", "nope", "-access-mode", "single-node-writer", "x"},
			1, "no controller plugin"},
		{"a create from an unknown snapshot", []string{"volume", "create", "-plugin", "hp", "-access-mode", "single-node-writer",
			"-snapshot", "nope", "x"}, 1, "CreateVolume: not found"},
		{"a clone of an unknown volume", []string{"volume", "create", "-plugin", "hp", "-access-mode", "single-node-writer",
			"-clone-from", "nope", "x"}, 1, "clone_from: volume not found"},
		{"a create with an unknown access mode", []string{"volume", "create", "-plugin", "hp", "-access-mode", "nobody", "x"}, 2,
			`-access-mode "nobody": want one of`},
		{"an expand of an unknown volume", []string{"volume", "expand", "-size", "2MiB", "nope"}, 1, "volume not found"},
		{"a modify of an unknown parameter", []string{"volume", "modify", "-param", "colour=blue", "db"}, 1, "colour"},
		{"a modify of an unknown volume", []string{"volume", "modify", "-param", "tier=fast", "nope"}, 1, "volume not found"},
		{"a delete of a claimed volume", []string{"volume", "delete", "db"}, 1, "volume in use"},
		{"a delete of an unknown volume", []string{"volume", "delete", "nope"}, 1, "volume not found"},
		{"a snapshot of an unknown volume", []string{"snapshot", "create", "nope", "n"}, 1, "volume not found"},
		{"the snapshots of no controller", []string{"snapshot", "list", "-plugin", "nope"}, 1, "no controller plugin"},

		{"an unknown Docker volume", []string{"docker", "volume", "inspect", "nope"}, 1, "no such volume"},
		{"a Docker volume on an unknown driver", []string{"docker", "volume", "create", "-driver", "nope", "data"}, 1, "plugin not found"},
		{"a Docker volume with no driver", []string{"docker", "volume", "create", "data"}, 1, "default driver"},
		{"a mount of an unknown Docker volume", []string{"docker", "volume", "mount", "nope", "c1"}, 1, "no such volume"},
		{"an unmount of an unknown Docker volume", []string{"docker", "volume", "unmount", "nope", "c1"}, 1, "no such volume"},
		{"a removal of an unknown Docker volume", []string{"docker", "volume", "rm", "nope"}, 1, "no such volume"},
		{"the path of an unknown Docker volume", []string{"docker", "volume", "path", "nope"}, 1, "no such volume"},
		{"a drain on one agent", []string{"node", "drain", "n1"}, 1, "not in a fleet"},

		{"an unknown subcommand", []string{"volume", "frobnicate"}, 2, `unknown subcommand "frobnicate"`},
		{"an unknown flag", []string{"volume", "mount", "-bogus", "db", "a1"}, 2, "unknown flag: -bogus"},
		{"a missing argument", []string{"volume", "mount", "db"}, 2, "mount needs ID ALLOC"},
		{"a missing required flag", []string{"volume", "expand", "db"}, 2, "missing required flag -size"},
		{"a bad Docker volume name", []string{"docker", "volume", "create", "a/b"}, 2, "path separator"},
		{"an argument too many", []string{"node", "list", "x"}, 2, "takes no arguments"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stderr, code := run(c.args...)
			requireSaidOnce(t, stderr, code, c.exit, c.want)
		})
	}
	t.Run("no agent", func(t *testing.T) {
		_, stderr, code := cli(t, "plugin", "list", "-data-dir", dataDir(t))
		requireSaidOnce(t, stderr, code, 1, "no agent is running")
	})
	require.NotContains(t, agentProc.stderr.String(), "status=500", "a refusal is no 500")
}

// requireSaidOnce checks a refusal's stderr: the exit code, the phrase, and
// a message that says each thing once after the command path, the label
// cli.Execute puts first, and names no package. A usage error's second line, "see: <command>
// -h", and a remedy's, "start one with: ...", are left out.
func requireSaidOnce(t *testing.T, stderr string, code, exit int, want string) {
	t.Helper()
	require.Equal(t, exit, code, stderr)
	line, rest, _ := strings.Cut(strings.TrimSpace(stderr), "\n")
	require.True(t, rest == "" || strings.HasPrefix(rest, "see: ") || strings.HasPrefix(rest, "start one with: "),
		"one line of refusal: %q", stderr)
	require.True(t, strings.HasPrefix(line, "plugvisor "), "the command path first: %q", line)
	require.Contains(t, line, want)
	_, msg, ok := strings.Cut(line, ": ") // the command path holds no ": "
	require.True(t, ok, "a message after the command path: %q", line)
	require.Empty(t, errwalk.Repeated(msg), "%q says a thing twice", line)
	require.False(t, packagePrefix.MatchString(msg), "%q names a package", line)
}

// packagePrefix finds a segment of a message that is one of our packages'
// names: "registry: ...". The volume manager's ("volumes: ") and the
// fleet's are not in it yet: their turn is another change of issue 43's.
var packagePrefix = regexp.MustCompile(`(^|: )(api|csi|catalog|controller|registry|storage|discovery|dockervolume|supervisor|actors|names|plugintype|kubeletreg|agent|errclass|messages|volumes|fleet|member): `)
