package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/api"
	cmdline "github.com/plugvisor/plugvisor/internal/cli"
	"github.com/plugvisor/plugvisor/version"
)

// runHere runs a command line in this process and returns stdout, stderr
// and the exit code.
func runHere(args ...string) (string, string, int) {
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return stdout.String(), stderr.String(), code
}

// allCommands lists the command path of every command the CLI has,
// hidden ones aside.
func allCommands() [][]string {
	root := newRootCmd()
	cmdline.Prepare(root)
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		if c.Hidden {
			return
		}
		paths = append(paths, path)
		for _, sub := range c.Commands() {
			walk(sub, append(path[:len(path):len(path)], sub.Name()))
		}
	}
	walk(root, nil)
	return paths
}

func TestEveryCommandsHelpShowsTheUsageOnceWithAnExample(t *testing.T) {
	paths := allCommands()
	require.Greater(t, len(paths), 30, "the walk found the commands")
	for _, path := range paths {
		t.Run("plugvisor "+strings.Join(path, " "), func(t *testing.T) {
			for _, help := range []string{"-h", "--help", "-help"} {
				stdout, stderr, code := runHere(append(path[:len(path):len(path)], help)...)
				require.Zero(t, code, stderr)
				require.Empty(t, stderr)
				require.Equal(t, 1, strings.Count(stdout, "Usage:"), "the usage once:\n%s", stdout)
				require.Equal(t, 1, strings.Count(stdout, "Examples:\n  "), "an example:\n%s", stdout)
				require.Contains(t, stdout, "\n  plugvisor "+strings.Join(path, " "), "the usage names the command")
				require.NotContains(t, stdout, " --", "flags are shown as typed, with one dash")
				_, examples, _ := strings.Cut(stdout, "Examples:\n")
				examples, _, _ = strings.Cut(examples, "\n\n")
				for _, line := range strings.Split(examples, "\n") {
					if line = strings.TrimSpace(line); !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, "-") {
						require.Contains(t, line, "plugvisor ", "an example runs plugvisor as it is installed")
					}
				}
			}
		})
	}
	stdout, _, code := runHere("help", "volume", "mount")
	require.Zero(t, code)
	require.Contains(t, stdout, "plugvisor volume mount ID ALLOC [flags]")
}

// The API registers unix sockets only; plugin register offers nothing else.
func TestPluginRegisterOffersTheUnixSocketOnly(t *testing.T) {
	stdout, stderr, code := runHere("plugin", "register", "-h")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "-socket string")
	require.NotContains(t, stdout, "-address")
	require.NotContains(t, stdout, "tcp://")
}

func TestVersionPrintsTheBuild(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"-version"}, {"--version"}} {
		stdout, stderr, code := runHere(args...)
		require.Zero(t, code, stderr)
		require.Equal(t, version.Get().String()+"\n", stdout, "%v", args)
	}
	require.Contains(t, version.Get().String(), "plugvisor ")
}

func TestCompletionScriptsAreGenerated(t *testing.T) {
	for shell, want := range map[string]string{
		"bash": "__start_plugvisor", "zsh": "#compdef plugvisor", "fish": "complete -c plugvisor", "powershell": "Register-ArgumentCompleter",
	} {
		stdout, stderr, code := runHere("completion", shell)
		require.Zero(t, code, stderr)
		require.Contains(t, stdout, want, shell)
	}
	_, stderr, code := runHere("completion", "tcsh")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `no completion for shell "tcsh"`)
}

// emptyDataDir returns a data dir where no agent runs: a command that sent
// a request would fail with "no agent is running".
func emptyDataDir(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "no-agent")
	require.NoError(t, os.Mkdir(dir, 0o700))
	return dir
}

func TestMissingFlagsAndArgumentsAreNamedBeforeAnyRequest(t *testing.T) {
	dir := emptyDataDir(t)
	notAList := filepath.Join(t.TempDir(), "volume.json")
	require.NoError(t, os.WriteFile(notAList, []byte(`{"id":"db"}`), 0o600))
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"volume create without -access-mode", []string{"volume", "create", "-plugin", "hp", "db"}, "missing required flag -access-mode (access mode"},
		{"volume create without -plugin", []string{"volume", "create", "-access-mode", "single-node-writer", "db"}, "missing required flag -plugin"},
		{"volume create without its ID", []string{"volume", "create", "-plugin", "hp", "-access-mode", "single-node-writer"}, "create needs ID, e.g. plugvisor volume create"},
		{"volume register with a topology that is not KEY=VALUE", []string{"volume", "register", "-id", "db", "-plugin", "hp", "-access-mode", "single-node-writer", "-topology", "zone"},
			`"zone" is not KEY=VALUE`},
		{"volume register with a topology key holding a control character", []string{"volume", "register", "-id", "db", "-plugin", "hp", "-access-mode", "single-node-writer", "-topology", "zo\x01ne=a"},
			`topology segment key "zo\x01ne" must not contain`},
		{"volume register without -id", []string{"volume", "register", "-plugin", "hp", "-access-mode", "single-node-writer"}, "missing required flag -id"},
		{"volume register without -access-mode or -capability", []string{"volume", "register", "-id", "db", "-plugin", "hp"},
			"missing required flag -access-mode (or one -capability or more)"},
		{"volume register with an unknown capability", []string{"volume", "register", "-id", "db", "-plugin", "hp", "-capability", "access=sometimes"},
			`capability "access=sometimes": access: unknown access mode "sometimes"`},
		{"volume register with a capability key it does not know", []string{"volume", "register", "-id", "db", "-plugin", "hp", "-capability", "access=single-node-writer,colour=red"},
			`unknown key "colour" (keys: access, attachment, fs)`},
		{"volume register with -capability and -access-mode", []string{"volume", "register", "-id", "db", "-plugin", "hp", "-access-mode", "single-node-writer",
			"-capability", "access=multi-node-reader-only"}, "leave -access-mode and -attachment-mode out"},
		{"volume register -f with -id", []string{"volume", "register", "-f", "volumes.json", "-id", "db"}, "-f FILE describes the volumes: leave -id out"},
		{"volume register -f of a missing file", []string{"volume", "register", "-f", filepath.Join(dir, "none.json")}, "-f: open "},
		{"volume register -f of a file that is no list", []string{"volume", "register", "-f", notAList}, "not a JSON list of volumes"},
		{"volume register without -id or -f", []string{"volume", "register", "-access-mode", "single-node-writer"}, "missing required flags -id (the volume's ID, as the plugin knows it), -plugin"},
		{"volume create with an unknown access mode", []string{"volume", "create", "-plugin", "hp", "-access-mode", "bogus", "db"},
			`-access-mode "bogus": want one of single-node-reader-only, single-node-writer, multi-node-reader-only, multi-node-single-writer or multi-node-multi-writer`},
		{"volume create with an unknown attachment mode", []string{"volume", "create", "-plugin", "hp", "-access-mode", "single-node-writer", "-attachment-mode", "blk", "db"},
			`-attachment-mode "blk": want block-device or file-system`},
		{"volume register with an unknown access mode", []string{"volume", "register", "-id", "db", "-plugin", "hp", "-access-mode", "bogus"},
			`-access-mode "bogus": want one of`},
		{"plugin list with a flag near -type", []string{"plugin", "list", "-typ", "csi-node"}, "unknown flag: -typ (did you mean -type?)"},
		{"volume mount with an unknown access mode", []string{"volume", "mount", "-access-mode", "often", "db", "web-1"}, `-access-mode "often": want one of`},
		{"volume mount with a negative mount group", []string{"volume", "mount", "-mount-group", "-1", "db", "web-1"}, `-mount-group "-1" is not a GID: give a decimal number from 0 to 4294967294`},
		{"volume mount with a mount group that is no number", []string{"volume", "mount", "-mount-group", "staff", "db", "web-1"}, `-mount-group "staff" is not a GID`},
		{"volume mount with an absurd mount group", []string{"volume", "mount", "-mount-group", "4294967295", "db", "web-1"}, `-mount-group "4294967295" is not a GID`},
		{"volume claim with a mount group", []string{"volume", "claim", "-mount-group", "5", "db", "web-1"}, "unknown flag: -mount-group"},
		{"volume expand without -size", []string{"volume", "expand", "db"}, "missing required flag -size"},
		{"volume mount without the alloc", []string{"volume", "mount", "db"}, "mount needs ID ALLOC, e.g. plugvisor volume mount db web-1"},
		{"plugin register without -alloc", []string{"plugin", "register", "-type", "csi-node", "-name", "hp", "-socket", "/run/csi/hp.sock"}, "missing required flag -alloc (allocation ID"},
		{"plugin register without an address", []string{"plugin", "register", "-type", "csi-node", "-name", "hp", "-alloc", "a1"}, "register needs -socket PATH"},
		{"plugin register with a network address", []string{"plugin", "register", "-type", "csi-node", "-name", "hp", "-alloc", "a1", "-address", "tcp://h:1"}, "unknown flag: -address"},
		{"plugin deregister without the alloc", []string{"plugin", "deregister", "csi-node", "hp"}, "deregister needs TYPE NAME ALLOC"},
		{"plugin status with three arguments", []string{"plugin", "status", "csi-node", "hp", "x"}, "status takes NAME or TYPE NAME, or nothing"},
		{"plugin expect without a name", []string{"plugin", "expect", "-nodes", "2"}, "expect needs NAME, e.g. plugvisor plugin expect hostpath"},
		{"plugin wait without a name", []string{"plugin", "wait", "csi-node"}, "wait needs TYPE NAME"},
		{"volume modify without -param", []string{"volume", "modify", "db"}, "missing required flag -param"},
		{"volume modify with a param that is not KEY=VALUE", []string{"volume", "modify", "-param", "tier", "db"}, `"tier" is not KEY=VALUE`},
		{"plugin capacity without a plugin", []string{"plugin", "capacity"}, "capacity needs PLUGIN, e.g. plugvisor plugin capacity hostpath"},
		{"plugin capacity with an unknown access mode", []string{"plugin", "capacity", "-capability", "access=everyone", "hp"}, `capability "access=everyone": access`},
		{"plugin capacity with an unknown attachment mode", []string{"plugin", "capacity", "-capability", "access=single-node-writer,attachment=floppy", "hp"}, `capability "access=single-node-writer,attachment=floppy": attachment`},
		{"plugin capacity with a capability that is not KEY=VALUE", []string{"plugin", "capacity", "-capability", "single-node-writer", "hp"}, `"single-node-writer" is not KEY=VALUE`},
		{"plugin capacity with two topologies", []string{"plugin", "capacity", "-topology", "a=1", "-topology", "b=2", "hp"}, "-topology is given 2 times"},
		{"snapshot list without a plugin or volume", []string{"snapshot", "list"}, "list needs -plugin P or -volume ID"},
		{"snapshot create without a name", []string{"snapshot", "create", "db"}, "create needs VOLUME NAME"},
		{"docker volume create with two names", []string{"docker", "volume", "create", "db", "db2"}, "accepts at most 1 arg"},
		{"hostpath-csi without -endpoint", []string{"hostpath-csi", "-root", "/tmp/x"}, "missing required flag -endpoint"},
		{"docker-volume-plugin without -root", []string{"docker-volume-plugin", "-socket", "/tmp/x.sock"}, "missing required flag -root"},
		{"agent with a cluster flag but no -cluster-etcd", []string{"agent", "-cluster-address", "127.0.0.1:0"}, "-cluster-address needs -cluster-etcd"},
		{"agent in cluster mode without -cluster-address", []string{"agent", "-cluster-etcd", "http://127.0.0.1:9"}, "-cluster-address is required in cluster mode"},
		{"agent in cluster mode without TLS", []string{"agent", "-cluster-etcd", "http://127.0.0.1:9", "-cluster-address", "127.0.0.1:0"},
			"cluster mode needs -cluster-ca, -cluster-cert and -cluster-key"},
		{"agent -cluster-insecure off loopback", []string{"agent", "-cluster-etcd", "http://127.0.0.1:9", "-cluster-address", "10.0.0.5:7946", "-cluster-insecure"},
			"-cluster-insecure works only on a loopback -cluster-address"},
		{"agent with half the members' TLS", []string{"agent", "-cluster-etcd", "http://127.0.0.1:9", "-cluster-address", "127.0.0.1:0", "-cluster-ca", "ca.pem"},
			"-cluster-ca, -cluster-cert and -cluster-key go together"},
		{"etcd with a negative -auto-compaction-retention", []string{"etcd", "-auto-compaction-retention", "-1s"},
			"-auto-compaction-retention -1s: give a positive duration, e.g. 5m, or 0 for none"},
		{"etcd snapshot without a subcommand", []string{"etcd", "snapshot"}, "missing subcommand (want restore, save)"},
		{"an unknown flag", []string{"plugin", "list", "-nope"}, "unknown flag: -nope"},
		{"a flag without its value", []string{"volume", "list", "-data-dir", dir, "-namespace"}, "flag needs an argument: -namespace"},
		{"a group without a subcommand", []string{"snapshot"}, "missing subcommand (want create, delete, list)"},
		{"an unknown subcommand", []string{"plugin", "show"}, `unknown subcommand "show"`},
		{"an unknown command", []string{"volumes"}, `unknown command "volumes"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if !slices.Contains(args, "-data-dir") && !strings.Contains(args[0], "-") {
				args = append(args, "-data-dir", dir)
			}
			stdout, stderr, code := runHere(args...)
			require.Equal(t, 2, code, "a usage error: %s", stderr)
			require.Contains(t, stderr, tc.want)
			require.NotContains(t, stderr, "no agent is running", "refused before any request")
			require.Contains(t, stderr, "see: plugvisor")
			require.Empty(t, stdout)
		})
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "nothing was started or written")
}

func TestFlagsTakeOneDashOrTwoAndComeAnywhere(t *testing.T) {
	dir := emptyDataDir(t)
	noAgent := "no agent is running at " + dir + "/plugvisor.sock"
	for _, args := range [][]string{
		{"volume", "mount", "db", "web-1", "-data-dir", dir},
		{"volume", "mount", "db", "--data-dir", dir, "web-1"},
		{"volume", "mount", "-data-dir=" + dir, "-read-only", "db", "web-1", "-json"},
		{"volume", "-namespace", "batch", "mount", "db", "web-1", "--data-dir=" + dir},
		{"plugin", "status", "csi-node", "-data-dir", dir, "-json", "hostpath"},
		{"volume", "create", "db", "-plugin", "hp", "--access-mode", "single-node-writer", "-size", "1GiB", "-data-dir", dir},
		{"docker", "volume", "create", "db", "-driver", "local", "-opt", "size=1G", "-data-dir", dir},
	} {
		_, stderr, code := runHere(args...)
		require.Equal(t, 1, code, "%v: %s", args, stderr)
		require.Contains(t, stderr, noAgent, "%v: parsed, then sent to the agent of -data-dir", args)
	}
}

func TestNormalizeArgsKeepsValuesAndPositionals(t *testing.T) {
	root := newRootCmd()
	cmdline.Prepare(root)
	for _, tc := range []struct{ in, want string }{
		{"volume create -name -x -plugin hp db", "volume create --name -x --plugin hp db"},
		{"volume list -json -namespace=ns", "volume list --json --namespace=ns"},
		{"plugin status csi-node hp -h", "plugin status csi-node hp -h"},
		{"volume mount db web-1 -- -json", "volume mount db web-1 -- -json"},
		{"volume expand -size 2GiB --limit 3GiB -data-dir -d", "volume expand --size 2GiB --limit 3GiB --data-dir -d"},
		{"-version", "--version"},
	} {
		require.Equal(t, strings.Fields(tc.want), cmdline.NormalizeArgs(root, strings.Fields(tc.in)), tc.in)
	}
}

// fakeTerminal makes isTerminal say yes for the writers given, for one test.
func fakeTerminal(t *testing.T, terminals ...io.Writer) {
	old, oldTick := isTerminal, progressTick
	isTerminal = func(w io.Writer) bool {
		for _, term := range terminals {
			if w == term {
				return true
			}
		}
		return false
	}
	progressTick = 10 * time.Millisecond
	t.Cleanup(func() { isTerminal, progressTick = old, oldTick })
}

func TestProgressShowsOnATerminalAndNotUnderJSON(t *testing.T) {
	dir := emptyDataDir(t)
	mount := []string{"volume", "mount", "db", "web-1", "-data-dir", dir}
	create := []string{"volume", "create", "-plugin", "hp", "-access-mode", "single-node-writer", "db", "-data-dir", dir}
	for _, tc := range []struct {
		name     string
		args     []string
		terminal bool
		want     string
	}{
		{"a mount on a terminal", mount, true, "mounting default/db for alloc web-1"},
		{"a create on a terminal", create, true, "creating volume default/db on plugin hp"},
		{"a mount with -json on a terminal", append(mount, "-json"), true, ""},
		{"a mount into a pipe", mount, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if tc.terminal {
				fakeTerminal(t, &stderr)
			}
			require.Equal(t, 1, run(tc.args, &stdout, &stderr))
			// Under -json the error is a JSON object: what precedes it is progress.
			line, _, _ := strings.Cut(strings.TrimPrefix(stderr.String(), `{"error":"`), "plugvisor volume")
			if tc.want == "" {
				require.Empty(t, line, "no progress")
				return
			}
			// A frame at least (a loaded machine may draw more before the
			// answer comes), then the line is cleared.
			require.Regexp(t, `^(\r\033\[K[-\\|/] `+regexp.QuoteMeta(tc.want)+` \(\d+s\))+\r\033\[K$`, line, "frames, then the line is cleared")
		})
	}
}

func TestProgressRedrawsUntilItEnds(t *testing.T) {
	var w probe.LogBuffer
	fakeTerminal(t, &w)
	p := startProgress(&w, false, "waiting for csi-node hp")
	require.Eventually(t, func() bool { return strings.Count(w.String(), "\r") >= 3 }, 10*time.Second, 5*time.Millisecond)
	p.set("waiting for csi-node hp: not registered yet")
	require.Eventually(t, func() bool { return strings.Contains(w.String(), "not registered yet") }, 10*time.Second, 5*time.Millisecond)
	p.end()
	p.end() // twice is harmless
	out := w.String()
	require.True(t, strings.HasSuffix(out, "\r\033[K"), "the line is cleared at the end: %q", out)
	require.Contains(t, out, `\ waiting for csi-node hp`, "the spinner turns")
}

func TestPluginWaitSaysWhatItWaitedForWhenTimeRunsOut(t *testing.T) {
	dir := emptyDataDir(t)
	var stdout, stderr bytes.Buffer
	fakeTerminal(t, &stderr)
	code := run([]string{"plugin", "wait", "-timeout", "300ms", "csi-node", "hp", "-data-dir", dir}, &stdout, &stderr)
	require.Equal(t, 1, code)
	require.Empty(t, stdout.String())
	require.Contains(t, stderr.String(), "waiting for csi-node hp: the agent does not answer yet", "the progress line says what it waits for")
	require.True(t, strings.HasSuffix(stderr.String(),
		"\r\033[Kplugvisor plugin wait: csi-node hp not ready after 300ms: the agent does not answer yet\n"), "%q", stderr.String())
}

// TestAVolumesAttachmentsInAFleetArePrinted checks the lines "volume get"
// and "volume status" print for a volume a fleet records attached.
func TestAVolumesAttachmentsInAFleetArePrinted(t *testing.T) {
	var out strings.Builder
	v := api.VolumeJSON{ID: "db", PluginID: "hp", AccessMode: "single-node-writer", AttachmentMode: "file-system",
		Attachments: []api.AttachmentJSON{{NodeID: "n1", ExternalNodeID: "csi-n1", State: "attached"}}}
	require.NoError(t, printVolume(&out, commonFlags{}, v, "volume default/db"))
	require.Contains(t, out.String(), "  attached to node n1 (plugin node ID csi-n1): attached\n")

	out.Reset()
	v.Attachments = nil
	require.NoError(t, printVolume(&out, commonFlags{}, v, "volume default/db"))
	require.NotContains(t, out.String(), "attached to", "a volume on one node has no attachment line")
}
