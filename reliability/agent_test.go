//go:build reliability

package reliability_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// bin is the plugvisor binary under test, built once by TestMain.
var bin string

// shortDir is a temp dir short enough for the agent's API socket.
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "pvr")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

// agentProc is one plugvisor agent process.
type agentProc struct {
	cmd    *exec.Cmd
	dir    string
	client *http.Client
	stderr string // file that holds the agent's stderr
	exited chan error
}

// unixClient talks HTTP over the unix socket at path.
func unixClient(path string, timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		},
		MaxIdleConnsPerHost: 128,
	}}
}

// startAgent runs `plugvisor agent -data-dir dir args...` and waits (at most
// 30 s) until its health endpoint answers. The process is killed at the
// end of the test if it is still running.
func startAgent(t *testing.T, dir string, args ...string) *agentProc {
	t.Helper()
	a, err := tryStartAgent(dir, args...)
	require.NoError(t, err)
	t.Cleanup(a.kill)
	return a
}

func tryStartAgent(dir string, args ...string) (*agentProc, error) {
	stderr, err := os.CreateTemp("", "pvr-stderr")
	if err != nil {
		return nil, err
	}
	defer stderr.Close() // the child has its own copy
	a := &agentProc{dir: dir, stderr: stderr.Name(), exited: make(chan error, 1),
		client: unixClient(filepath.Join(dir, "plugvisor.sock"), 10*time.Second)}
	a.cmd = exec.Command(bin, append([]string{"agent", "-data-dir", dir, "-log-level", "warn",
		"-resync-interval", "1h", "-fingerprint-interval", "2s"}, args...)...)
	a.cmd.Stdout, a.cmd.Stderr = io.Discard, stderr
	if err := a.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { a.exited <- a.cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-a.exited:
			a.exited <- err
			log := a.log()
			_ = os.Remove(a.stderr)
			return nil, fmt.Errorf("agent exited at start (%v): %s", err, log)
		default:
		}
		if status, _, err := a.do("GET", "/v1/health", ""); err == nil && status == http.StatusOK {
			return a, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	log := a.log()
	a.kill()
	return nil, fmt.Errorf("agent did not answer within 30s: %s", log)
}

// log returns what the agent wrote to stderr.
func (a *agentProc) log() string {
	b, _ := os.ReadFile(a.stderr)
	return string(b)
}

// kill sends SIGKILL, waits for the process and removes its stderr file.
func (a *agentProc) kill() {
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	err := <-a.exited
	a.exited <- err
	a.client.CloseIdleConnections()
	_ = os.Remove(a.stderr)
}

// stop sends SIGTERM and returns how long the agent took to exit, and its
// error; after 60 s it is killed.
func (a *agentProc) stop() (time.Duration, error) {
	start := time.Now()
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-a.exited:
		a.exited <- err
		return time.Since(start), err
	case <-time.After(60 * time.Second):
		a.kill()
		return time.Since(start), fmt.Errorf("agent did not exit within 60s of SIGTERM")
	}
}

// do sends one request and returns the status and body.
func (a *agentProc) do(method, path, body string) (int, string, error) {
	req, err := http.NewRequest(method, "http://plugvisor"+path, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	// A listing of thousands of plugins is several MiB.
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	return resp.StatusCode, string(b), err
}

// registerBody registers plugin name of type "reliability" on a socket that
// does not exist (the API accepts a missing socket).
func registerBody(name, alloc string, options map[string]string) string {
	b, _ := json.Marshal(map[string]any{
		"type": "reliability", "name": name, "alloc_id": alloc,
		"connection": map[string]string{"socket_path": "/run/pvr-absent/" + name + ".sock"},
		"options":    options,
	})
	return string(b)
}

// names lists the registered plugin names of type "reliability".
func (a *agentProc) names(t *testing.T) map[string]bool {
	t.Helper()
	status, body, err := a.do("GET", "/v1/plugins?type=reliability", "")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, body)
	var out struct {
		Plugins []struct{ Name string } `json:"plugins"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &out))
	got := map[string]bool{}
	for _, p := range out.Plugins {
		got[p.Name] = true
	}
	return got
}

// metric reads one unlabelled gauge from /metrics.
func (a *agentProc) metric(name string) float64 {
	_, body, err := a.do("GET", "/metrics", "")
	if err != nil {
		return -1
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == name {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	return -1
}

// healthLatency times one health request on a new connection, as a new
// client would wait; a failure counts as an hour.
func (a *agentProc) healthLatency() time.Duration {
	return newConnHealth(filepath.Join(a.dir, "plugvisor.sock"))
}

// newConnHealth times one GET of /v1/health on a new connection to the
// unix socket at path; a failure counts as an hour.
func newConnHealth(path string) time.Duration {
	client := unixClient(path, 10*time.Second)
	client.Transport.(*http.Transport).DisableKeepAlives = true
	start := time.Now()
	resp, err := client.Get("http://plugvisor/v1/health")
	if err != nil {
		return time.Hour
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return time.Hour
	}
	return time.Since(start)
}

// healthWatch polls health every interval until stop is closed and returns
// the slowest answer.
func (a *agentProc) healthWatch(interval time.Duration, stop <-chan struct{}) <-chan time.Duration {
	out := make(chan time.Duration, 1)
	go func() {
		var worst time.Duration
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				out <- worst
				return
			case <-tick.C:
				worst = max(worst, a.healthLatency())
			}
		}
	}()
	return out
}
