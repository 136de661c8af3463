package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/csi/volumes"
)

// walkthroughStep is one command of a README walkthrough: its words, whether
// it runs in the background (a trailing "&"), and the lines the README shows
// it printing ("..." stands for anything).
type walkthroughStep struct {
	line       string
	args       []string
	background bool
	want       []string
}

// readmeWalkthrough reads the ```sh block marked <!-- walkthrough:NAME -->
// in README.md. A "# " line right under a command is what the command
// prints; other comments and blank lines are prose. The block's `export
// PLUGVISOR_DATA_DIR=...` names the data dir, which dataDir replaces; any
// line the test cannot run as written fails it.
func readmeWalkthrough(t *testing.T, name, dataDir string) []walkthroughStep {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	marker := "<!-- walkthrough:" + name + " -->\n```sh\n"
	start := bytes.Index(readme, []byte(marker))
	require.GreaterOrEqual(t, start, 0, "README.md has no %q block", marker)
	block, _, found := strings.Cut(string(readme[start+len(marker):]), "```\n")
	require.True(t, found, "the walkthrough block is not closed")

	var steps []walkthroughStep
	exported, inOutput := false, false
	expand := func(v string) string {
		require.Equal(t, agent.DataDirEnv, v, "the walkthrough uses $%s: only the data dir is substituted", v)
		return dataDir
	}
	scanner := bufio.NewScanner(strings.NewReader(block))
	for scanner.Scan() {
		line := scanner.Text()
		switch {
		case strings.TrimSpace(line) == "":
			inOutput = false
		case strings.HasPrefix(line, "#"):
			if inOutput {
				last := &steps[len(steps)-1]
				last.want = append(last.want, strings.TrimSpace(strings.TrimPrefix(line, "#")))
			}
		case strings.HasPrefix(line, "export "+agent.DataDirEnv+"="):
			exported = true
		case strings.HasPrefix(line, "plugvisor "):
			require.True(t, exported, "the walkthrough exports %s before its first command", agent.DataDirEnv)
			require.NotContains(t, line, `"`, "the test splits commands on spaces: no quotes")
			require.NotContains(t, line, `'`, "the test splits commands on spaces: no quotes")
			cmd, background := strings.CutSuffix(line, " &")
			steps = append(steps, walkthroughStep{line: line, args: strings.Fields(os.Expand(cmd, expand))[1:], background: background})
			inOutput = !background
		default:
			t.Fatalf("the walkthrough has a line the test cannot run as written: %q", line)
		}
	}
	require.NoError(t, scanner.Err())
	require.NotEmpty(t, steps)
	return steps
}

// wantPattern turns a line the README shows into a pattern of one output
// line: literal, but "..." matches anything.
func wantPattern(want string) *regexp.Regexp {
	return regexp.MustCompile(strings.ReplaceAll(regexp.QuoteMeta(want), `\.\.\.`, `.*`))
}

// TestTheReadmeVolumeWalkthroughRunsAsWritten runs README.md's volume
// walkthrough command by command, with only the data dir changed: the
// agent and the reference hostpath plugin in the background, then create,
// mount, status, unmount and delete against them. Each command must exit 0
// and print what the README shows; nothing may stay mounted.
func TestTheReadmeVolumeWalkthroughRunsAsWritten(t *testing.T) {
	dir := dataDir(t)
	t.Cleanup(func() { unmountAllUnder(t, dir) }) // after the processes stop, before the dir goes
	steps := readmeWalkthrough(t, "volumes", dir)
	env := append(os.Environ(), agent.DataDirEnv+"="+dir)

	var sequence []string
	for _, step := range steps {
		what := step.args[0]
		if what == "volume" {
			what += " " + step.args[1]
		}
		sequence = append(sequence, what)
		if step.background {
			startBackground(t, step, env, dir)
			continue
		}
		cmd := exec.Command(binary, step.args...)
		cmd.Env = env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.NoError(t, cmd.Run(), "%s\nstdout:\n%s\nstderr:\n%s", step.line, &stdout, &stderr)
		for _, want := range step.want {
			require.Regexp(t, wantPattern(want), stdout.String(), "%s: the README shows %q", step.line, want)
		}
	}
	require.Equal(t, []string{"agent", "hostpath-csi", "volume create", "volume mount", "volume status",
		"volume unmount", "volume delete", "volume list"}, sequence,
		"the walkthrough starts an agent and the plugin, then goes create, mount, status, unmount, delete")
	require.Empty(t, mountsUnder(t, dir), "nothing stays mounted after the walkthrough")
}

// startBackground runs a walkthrough's background command until the test
// ends, and waits until it is ready, as someone following the README
// would: the agent answers, the plugin is fingerprinted healthy.
func startBackground(t *testing.T, step walkthroughStep, env []string, dir string) {
	t.Helper()
	args := step.args
	if args[0] == "hostpath-csi" && os.Geteuid() != 0 {
		args = append(args, "-symlink-fallback") // as the README says for non-root
	}
	cmd := exec.Command(binary, args...)
	cmd.Env = env
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start(), step.line)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("%s did not stop on SIGTERM within 30s", step.line)
		}
	})
	ready := func() bool {
		select {
		case <-done:
			t.Fatalf("%s exited: %s", step.line, out)
		default:
		}
		switch args[0] {
		case "agent":
			resp, err := apiClient(dir).Get("http://plugvisor/v1/health")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return true
		case "hostpath-csi":
			return csiPluginHealthy(t, dir, "hostpath")
		}
		t.Fatalf("the test does not know when %q is ready", step.line)
		return false
	}
	require.Eventually(t, ready, time.Minute, 100*time.Millisecond, "%s never became ready: %s", step.line, out)
}

// csiPluginHealthy: the agent of dir fingerprinted both the controller and
// the node service of name healthy.
func csiPluginHealthy(t *testing.T, dir, name string) bool {
	var out struct {
		Plugins []struct {
			Type    string `json:"type"`
			Name    string `json:"name"`
			Healthy bool   `json:"healthy"`
		} `json:"plugins"`
	}
	getJSON(t, apiClient(dir), "/v1/csi/plugins", &out)
	healthy := map[string]bool{}
	for _, p := range out.Plugins {
		if p.Name == name && p.Healthy {
			healthy[p.Type] = true
		}
	}
	return healthy["csi-controller"] && healthy["csi-node"]
}

// mountsUnder lists the kernel's mount points under dir.
func mountsUnder(t *testing.T, dir string) map[string]bool {
	mounts, err := volumes.MountPointsUnder(volumes.DefaultMountInfoPath, dir)
	require.NoError(t, err)
	return mounts
}

// unmountAllUnder lazily unmounts whatever a failed run left mounted under
// dir, so that removing dir cannot reach through a mount.
func unmountAllUnder(t *testing.T, dir string) {
	for {
		mounts := mountsUnder(t, dir)
		if len(mounts) == 0 {
			return
		}
		for m := range mounts {
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
				t.Errorf("unmounting %s left by the test: %v", m, err)
				return
			}
		}
	}
}
