package main

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/internal/racelog"
	"github.com/plugvisor/plugvisor/internal/sdnotify"
)

// fakeSystemd listens on a notification socket as systemd does for a unit
// of Type=notify, and hands on each datagram it receives.
func fakeSystemd(t *testing.T) (string, <-chan string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	require.NoError(t, err)
	got := make(chan string, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			got <- string(buf[:n])
		}
	}()
	t.Cleanup(func() { conn.Close(); <-done })
	return path, got
}

// nextState is the next datagram the fake systemd received.
func nextState(t *testing.T, got <-chan string) string {
	t.Helper()
	select {
	case s := <-got:
		return s
	case <-time.After(settle):
		t.Fatalf("systemd heard nothing within %v", settle)
		return ""
	}
}

// TestTheAgentTellsSystemdItsStateAndReloadsItsLogLevelAtSIGHUP runs the
// agent as systemd would: READY=1 once its API answers; at SIGHUP,
// RELOADING=1, the config's new log level in force, the keys that wait for
// a restart named, then READY=1; a config that no longer loads changes
// nothing; STOPPING=1 at SIGTERM.
func TestTheAgentTellsSystemdItsStateAndReloadsItsLogLevelAtSIGHUP(t *testing.T) {
	dir := dataDir(t)
	config := filepath.Join(t.TempDir(), "agent.hcl")
	write := func(s string) { require.NoError(t, os.WriteFile(config, []byte(s), 0o600)) }
	write("data_dir = \"" + dir + "\"\nlog_level = \"info\"\n")
	socket, states := fakeSystemd(t)

	cmd := exec.Command(binary, "agent", "-config", config)
	races := t.TempDir()
	cmd.Env = append(os.Environ(), sdnotify.SocketEnv+"="+socket, racelog.Env(races))
	stderr := &probe.LogBuffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("the agent's log:\n%s", stderr)
		}
	})

	ready := nextState(t, states)
	require.True(t, strings.HasPrefix(ready, "READY=1\nSTATUS=API on "+filepath.Join(dir, "plugvisor.sock")), ready)
	resp, err := apiClient(dir).Get("http://plugvisor/v1/health")
	require.NoError(t, err, "the API answers once READY=1 is sent")
	resp.Body.Close()
	require.NotContains(t, stderr.String(), "[DEBUG]")

	write("data_dir = \"" + dir + "\"\nlog_level = \"debug\"\nnode_id = \"elsewhere\"\n")
	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	require.Regexp(t, `^RELOADING=1\nMONOTONIC_USEC=[0-9]+$`, nextState(t, states))
	require.True(t, strings.HasPrefix(nextState(t, states), "READY=1\n"))
	log := logged(t, stderr, "SIGHUP: config reloaded")
	require.Contains(t, log, "SIGHUP: log level changed: log_level=debug")
	require.Contains(t, log, "SIGHUP: these keys changed and take effect at the next start: keys=node_id")

	write("log_level = \"debug\"\nnode_id = 5\n")
	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	nextState(t, states)
	nextState(t, states)
	require.Contains(t, logged(t, stderr, "SIGHUP: the config was not reloaded; the agent runs on unchanged"),
		"agent.hcl:2:11: node_id: want a string")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, "STOPPING=1", nextState(t, states))
	select {
	case err := <-exited:
		require.NoError(t, err, "a clean exit")
	case <-time.After(settle):
		t.Fatal("the agent did not stop")
	}
	checkRaces(t, races)
}

// TestSIGHUPReadsTheTokenFileAgain runs an agent with -http and
// -token-file and no -config: after the file is rewritten and SIGHUP
// sent, a token it dropped is refused and a new one works, and a file
// that no longer loads leaves the tokens in force.
func TestSIGHUPReadsTheTokenFileAgain(t *testing.T) {
	const oldToken, newToken = "old-0123456789abcdef0123", "new-0123456789abcdef0123"
	dir := dataDir(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte(oldToken+" read ops\n"), 0o600))
	a := startAgent(t, dir, "-http", "127.0.0.1:0", "-token-file", tokens)
	m := regexp.MustCompile(`agent started: .* http=(127\.0\.0\.1:[0-9]+)`).FindStringSubmatch(logged(t, a.stderr, "agent started: "))
	require.NotNil(t, m, "the agent logs its TCP address:\n%s", a.stderr)
	health := func(token string) int {
		t.Helper()
		req, err := http.NewRequest("GET", "http://"+m[1]+"/v1/health", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := (&http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, health(oldToken))

	require.NoError(t, os.WriteFile(tokens, []byte(newToken+" read dashboards\n"), 0o600))
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGHUP))
	logged(t, a.stderr, "SIGHUP: token file reloaded: tokens=1")
	require.Equal(t, http.StatusUnauthorized, health(oldToken), "a token the file dropped is revoked")
	require.Equal(t, http.StatusOK, health(newToken))

	require.NoError(t, os.Chmod(tokens, 0o644))
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGHUP))
	logged(t, a.stderr, "SIGHUP: the token file was not reloaded; the tokens in force stay")
	require.Equal(t, http.StatusOK, health(newToken))
	require.NotContains(t, a.stderr.String(), newToken[:12], "no token in the logs")
}
