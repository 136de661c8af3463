package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/internal/racelog"
	"github.com/plugvisor/plugvisor/internal/testbin"
)

// binary is the plugvisor binary the end-to-end tests run, built once.
var binary string

func TestMain(m *testing.M) {
	bin, cleanup, err := testbin.Build(".", raceEnabled)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = bin
	code := m.Run()
	cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// dataDir returns a short temp data dir (the API socket path must fit in
// 107 bytes), removed with the test.
func dataDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "pv")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// agentProc is a plugvisor agent running as a subprocess.
type agentProc struct {
	cmd    *exec.Cmd
	dir    string
	stderr *probe.LogBuffer
	done   chan struct{}
}

// startAgent runs `plugvisor agent` on dir and waits until its API answers.
func startAgent(t *testing.T, dir string, extra ...string) *agentProc {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"agent", "-data-dir", dir, "-log-level", "debug"}, extra...)...)
	a := &agentProc{cmd: cmd, dir: dir, stderr: &probe.LogBuffer{}, done: make(chan struct{})}
	cmd.Stderr = a.stderr
	require.NoError(t, cmd.Start())
	go func() { _ = cmd.Wait(); close(a.done) }()
	t.Cleanup(func() {
		a.stop(t)
		if t.Failed() {
			t.Logf("the agent's log:\n%s", a.stderr)
		}
	})
	c := apiClient(dir)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := c.Get("http://plugvisor/v1/health")
		if err == nil {
			resp.Body.Close()
			return a
		}
		select {
		case <-a.done:
			t.Fatalf("agent exited at start: %s", a.stderr)
		default:
		}
		require.True(t, time.Now().Before(deadline), "agent did not answer within 20s: %v", err)
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (a *agentProc) stop(t *testing.T) {
	select {
	case <-a.done:
		return
	default:
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(60 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.done
		t.Errorf("agent did not stop on SIGTERM within 60s")
	}
}

func (a *agentProc) kill9() {
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.done
}

// settle is how long an end-to-end test waits for the agent and its
// plugins to reach a state (discovered, fingerprinted healthy): generous,
// since the suite runs its packages in parallel on 2 cores.
const settle = time.Minute

// logged waits until log holds want and returns it. An agent's log comes
// through a pipe that a goroutine of os/exec copies: what the agent logged
// before an answer or a systemd notice can arrive after it.
func logged(t *testing.T, log *probe.LogBuffer, want string) string {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Contains(log.String(), want) }, settle, 10*time.Millisecond,
		"the agent logs %q:\n%s", want, log)
	return log.String()
}

// apiClient talks HTTP to the agent of dir over its unix socket.
func apiClient(dir string) *http.Client {
	socket := filepath.Join(dir, "plugvisor.sock")
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			// Tests make a client per call, often in a polling loop: kept-alive
			// connections would pile up against the agent's connection cap.
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", socket)
			},
		},
	}
}

// cli runs a plugvisor command and returns stdout, stderr and exit code.
func cli(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	races := t.TempDir()
	cmd.Env = append(os.Environ(), racelog.Env(races))
	defer checkRaces(t, races)
	err := cmd.Run()
	code := 0
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return stdout.String(), stderr.String(), code
}

func registerBody(name, alloc string) string {
	return fmt.Sprintf(`{"type":"csi-node","name":%q,"alloc_id":%q,"connection":{"socket_path":"/run/csi/%s.sock"}}`,
		name, alloc, alloc)
}

func post(c *http.Client, path, body string) (int, string, error) {
	resp, err := c.Post("http://plugvisor"+path, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func getJSON(t *testing.T, c *http.Client, path string, out any) {
	t.Helper()
	resp, err := c.Get("http://plugvisor" + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
}

// checkRaces fails the test on a race report, under dir, of the binary
// (built with -race when the tests are) that touches our code, and logs
// the races wholly inside protoactor's cluster (see package racelog).
func checkRaces(t interface {
	Fatal(...any)
	Log(...any)
}, dir string) {
	ours, theirs, err := racelog.Reports(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, race := range theirs {
		t.Log("a data race inside another module: " + race)
	}
	if len(ours) > 0 {
		t.Fatal("data races in our code:\n" + strings.Join(ours, "\n"))
	}
}
