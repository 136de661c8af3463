package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/internal/mountinfo"
)

func TestRegisterThroughTheCLIShowsInListAndEvents(t *testing.T) {
	dir := dataDir(t)
	startAgent(t, dir)

	events := exec.Command(binary, "events", "-data-dir", dir, "-replay")
	out, err := events.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, events.Start())
	t.Cleanup(func() { _ = events.Process.Kill(); _ = events.Wait() })
	lines := bufio.NewScanner(out)
	// With -replay the stream shows a2 whether it subscribed before or
	// after the registration.
	stdout, stderr, code := cli(t, "plugin", "register", "-data-dir", dir,
		"-type", "csi-node", "-name", "hostpath", "-alloc", "a1", "-socket", "/run/csi/a1.sock")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "registered csi-node hostpath alloc a1")

	list, stderr, code := cli(t, "plugin", "list", "-data-dir", dir)
	require.Zero(t, code, stderr)
	require.Contains(t, list, "csi-node  hostpath  a1")

	_, _, code = cli(t, "plugin", "register", "-data-dir", dir,
		"-type", "csi-node", "-name", "hostpath", "-alloc", "a2", "-socket", "/run/csi/a2.sock")
	require.Zero(t, code)
	seen := make(chan string, 8)
	go func() {
		for lines.Scan() {
			seen <- lines.Text()
		}
		close(seen)
	}()
	requireLine(t, seen, "registered   csi-node hostpath alloc a2")

	status, _, code := cli(t, "plugin", "status", "-data-dir", dir, "-json", "csi-node", "hostpath")
	require.Zero(t, code)
	require.Contains(t, status, `"alloc_id": "a2"`)
}

func requireLine(t *testing.T, lines <-chan string, want string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	var got []string
	for {
		select {
		case line, ok := <-lines:
			require.True(t, ok, "stream ended; lines so far: %q", got)
			if strings.Contains(line, want) {
				return
			}
			got = append(got, line)
		case <-deadline:
			t.Fatalf("no line containing %q; got %q", want, got)
		}
	}
}

func TestAcknowledgedRegistrationsSurviveKill9(t *testing.T) {
	dir := dataDir(t)
	agent := startAgent(t, dir)
	c := apiClient(dir)

	// 4,000 registrations from 32 workers, kill -9 at the 2,000th answer:
	// every registration is a supervised plugin instance the agent starts
	// again and stops at the end, which on a loaded machine takes long.
	const total, workers = 4000, 32
	var next, acked atomic.Int64
	var killed atomic.Bool
	ackedNames := make([][]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > total {
					return
				}
				name := fmt.Sprintf("p%d", i)
				code, _, err := post(c, "/v1/plugins", registerBody(name, "a"))
				for err != nil && !killed.Load() { // a loaded agent may drop a connection: send it again
					code, _, err = post(c, "/v1/plugins", registerBody(name, "a"))
				}
				if err != nil {
					return // the agent is gone
				}
				if code == http.StatusOK {
					ackedNames[w] = append(ackedNames[w], name)
					if acked.Add(1) == total/2 {
						killed.Store(true)
						agent.kill9()
					}
				}
			}
		})
	}
	wg.Wait()
	agent.kill9()

	startAgent(t, dir)
	var out struct {
		Plugins []struct {
			Name string `json:"name"`
		} `json:"plugins"`
	}
	getJSON(t, apiClient(dir), "/v1/plugins?type=csi-node", &out)
	present := map[string]bool{}
	for _, p := range out.Plugins {
		present[p.Name] = true
	}
	missing := 0
	for _, names := range ackedNames {
		for _, n := range names {
			if !present[n] {
				missing++
			}
		}
	}
	t.Logf("sent up to %d registrations from %d workers; %d acknowledged before kill -9; %d present after restart; %d acknowledged but missing",
		total, workers, acked.Load(), len(out.Plugins), missing)
	require.GreaterOrEqual(t, acked.Load(), int64(total/2))
	require.Zero(t, missing, "every registration that got a success response is present after restart")
}

func TestBadAPIRequestsGetClearErrorsAndChangeNothing(t *testing.T) {
	dir := dataDir(t)
	startAgent(t, dir)
	c := apiClient(dir)
	code, body, err := post(c, "/v1/plugins", registerBody("keep", "a1"))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, body)
	before := listing(t, c)

	long := "/" + strings.Repeat("s", 103) + ".sock"
	cases := []struct {
		name, method, path, body string
		status                   int
		want                     string
	}{
		{"bad JSON", "POST", "/v1/plugins", `{"type":`, 400, "bad request body"},
		{"not an object", "POST", "/v1/plugins", `[1,2]`, 400, "bad request body"},
		{"empty body", "POST", "/v1/plugins", ``, 400, "empty"},
		{"unknown field", "POST", "/v1/plugins", `{"type":"csi-node","name":"x","alloc_id":"a","colour":"red"}`, 400, "colour"},
		{"wrong field type", "POST", "/v1/plugins", `{"type":7}`, 400, "bad request body"},
		{"oversized body", "POST", "/v1/plugins", `{"type":"` + strings.Repeat("x", 2<<20) + `"}`, 413, "request body is over a limit: it may hold 1048576 bytes"},
		{"missing name", "POST", "/v1/plugins", `{"type":"csi-node","alloc_id":"a","connection":{"socket_path":"/x.sock"}}`, 400, "plugin name must not be empty"},
		{"missing alloc", "POST", "/v1/plugins", `{"type":"csi-node","name":"x","connection":{"socket_path":"/x.sock"}}`, 400, "alloc ID must not be empty"},
		{"missing connection", "POST", "/v1/plugins", `{"type":"csi-node","name":"x","alloc_id":"a"}`, 400, "socket path or an address"},
		{"traversal in name", "POST", "/v1/plugins", registerBody("../../etc", "a"), 400, "path separator"},
		{"dot-dot in alloc", "POST", "/v1/plugins", registerBody("x", ".."), 400, `alloc ID \"..\" must not contain \"..\"`},
		{"a plugin name of one dot", "POST", "/v1/plugins", registerBody(".", "a"), 400, `plugin name must not be \".\"`},
		{"a right-to-left override in a name", "POST", "/v1/plugins", registerBody("ev\u202eil", "a"), 400, "bidirectional"},
		{"a network address", "POST", "/v1/plugins", `{"type":"csi-node","name":"x","alloc_id":"a","connection":{"address":"tcp://127.0.0.1:9"}}`, 400, "unix socket only"},
		{"a socket path that is a regular file", "POST", "/v1/plugins", `{"type":"csi-node","name":"x","alloc_id":"a","connection":{"socket_path":"/etc/passwd"}}`, 400, "is a regular file, not a socket"},
		{"a socket path that is a directory", "POST", "/v1/plugins", `{"type":"csi-node","name":"x","alloc_id":"a","connection":{"socket_path":"/etc"}}`, 400, "is a directory, not a socket"},
		{"a socket path that is a device", "POST", "/v1/plugins", `{"type":"csi-node","name":"x","alloc_id":"a","connection":{"socket_path":"/dev/zero"}}`, 400, "is a character device, not a socket"},
		{"relative socket path", "POST", "/v1/plugins", `{"type":"csi-node","name":"x","alloc_id":"a","connection":{"socket_path":"x.sock"}}`, 400, "must be absolute"},
		{"socket path too long", "POST", "/v1/plugins", `{"type":"csi-node","name":"x","alloc_id":"a","connection":{"socket_path":"` + long + `"}}`, 400, "over the unix limit of 107"},
		{"name too long", "POST", "/v1/plugins", registerBody(strings.Repeat("n", 200), "a"), 400, "over the limit of 128"},
		{"missing plugin", "GET", "/v1/plugins/csi-node/nope", "", 404, "not registered"},
		{"deregister unknown alloc", "DELETE", "/v1/plugins/csi-node/keep/nope", "", 404, "has no allocation"},
		{"deregister unknown plugin", "DELETE", "/v1/plugins/csi-node/nope/a1", "", 404, "not found"},
		{"dot-dot inside a path name", "GET", "/v1/plugins/csi-node/a..b", "", 400, "must not contain"},
		{"encoded traversal in path", "DELETE", "/v1/plugins/csi-node/keep/..%2f..", "", 400, "path separator"},
		{"bad type filter", "GET", "/v1/plugins?type=../x", "", 400, "path separator"},
		{"bad replay flag", "GET", "/v1/events?replay=maybe", "", 400, "replay"},
		{"wrong method on plugins", "PUT", "/v1/plugins", "{}", 405, "method not allowed"},
		{"wrong method on health", "POST", "/v1/health", "", 405, "method not allowed"},
		{"unknown endpoint", "GET", "/v1/nothing", "", 404, "no such endpoint"},
		{"volume with an unknown field", "POST", "/v1/volumes", `{"id":"v","colour":1}`, 400, "unknown field"},
		{"volume with an unknown access mode", "POST", "/v1/volumes",
			`{"id":"v","plugin_id":"p","access_mode":"sometimes","attachment_mode":"file-system"}`, 400, "unknown access mode"},
		{"volume ID with traversal", "POST", "/v1/volumes",
			`{"id":"../v","plugin_id":"p","access_mode":"single-node-writer","attachment_mode":"file-system"}`, 400, "path separator"},
		{"mount of a missing volume", "POST", "/v1/volumes/default/nope/mount", `{"alloc_id":"a"}`, 404, "not found"},
		{"mount without an alloc", "POST", "/v1/volumes/default/nope/mount", `{"read_only":true}`, 400, "alloc_id is required"},
		{"mount with trailing data", "POST", "/v1/volumes/default/nope/mount", `{"alloc_id":"a"}{}`, 400, "data after the JSON object"},
		{"mount with a field of the old API", "POST", "/v1/volumes/default/nope/mount", `{"alloc_id":"a","fs_type":"ext4"}`, 400, "fs_type"},
		{"mount with a bad alloc", "POST", "/v1/volumes/default/nope/mount", `{"alloc_id":"../a"}`, 400, "alloc ID"},
		{"claim with the old release flag", "POST", "/v1/volumes/default/nope/claim", `{"alloc_id":"a","release":true}`, 400, "release"},
		{"release of a missing volume", "POST", "/v1/volumes/default/nope/release", `{"alloc_id":"a"}`, 404, "not found"},
		{"release with read_only", "POST", "/v1/volumes/default/nope/release", `{"alloc_id":"a","read_only":true}`, 400, "read_only"},
		{"unmount of an alloc with no mount", "POST", "/v1/volumes/default/nope/unmount", `{"alloc_id":"a"}`, 404, "no mount"},
		{"detach without a node", "POST", "/v1/volumes/default/nope/detach", `{}`, 400, "node_id is required"},
		{"detach of a missing volume", "POST", "/v1/volumes/default/nope/detach", `{"node_id":"n"}`, 404, "not found"},
		{"status of a bad namespace", "GET", "/v1/volumes/..%2fx/nope/status", "", 400, "namespace"},
		{"status of a missing volume", "GET", "/v1/volumes/default/nope/status", "", 404, "not found"},
		{"wrong method on volumes", "PUT", "/v1/volumes", "{}", 405, "method not allowed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, "http://plugvisor"+tc.path, strings.NewReader(tc.body))
			require.NoError(t, err)
			if tc.method != "GET" {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := c.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			require.Equal(t, tc.status, resp.StatusCode, string(b))
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			require.Contains(t, string(b), `"error":`)
			require.Contains(t, string(b), tc.want)
		})
	}
	require.Equal(t, before, listing(t, c), "no bad request changed the state")
}

func listing(t *testing.T, c *http.Client) string {
	t.Helper()
	resp, err := c.Get("http://plugvisor/v1/plugins")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func TestMetricsAreScraped(t *testing.T) {
	dir := dataDir(t)
	startAgent(t, dir)
	c := apiClient(dir)
	code, _, err := post(c, "/v1/plugins", registerBody("m", "a1"))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	resp, err := c.Get("http://plugvisor/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`plugvisor_registry_operations_total{op="register",result="ok"} 1`,
		`plugvisor_registry_operation_seconds_count{op="register"} 1`,
		`plugvisor_registry_batch_writes_count`,
		`plugvisor_registry_subscribers`,
		`go_goroutines`,
	} {
		require.Contains(t, string(b), want)
	}
}

func TestASecondAgentOnTheSameDataDirFailsClearly(t *testing.T) {
	dir := dataDir(t)
	startAgent(t, dir)
	_, stderr, code := cli(t, "agent", "-data-dir", dir)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "another plugvisor agent is using this data dir")
}

func TestTheCLISaysWhenNoAgentRuns(t *testing.T) {
	dir := dataDir(t)
	_, stderr, code := cli(t, "plugin", "list", "-data-dir", dir)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "no agent is running at "+dir+"/plugvisor.sock")
	require.Contains(t, stderr, "start one with: plugvisor agent -data-dir "+dir)
}

// TestTheDemoShowsAVolumesWholeLifeAndLeavesNothingBehind runs the demo
// and checks each step's line, the volume's life among them (create, mount,
// a reader joining, an agent restart, unmount from the surviving records,
// delete), and that nothing stays mounted or running afterwards.
func TestTheDemoShowsAVolumesWholeLifeAndLeavesNothingBehind(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: without it the demo links instead of bind-mounting, and no reader can join read-only")
	}
	stdout, stderr, code := cli(t, "demo")
	require.Zero(t, code, "demo failed:\n%s\n%s", stdout, stderr)
	for _, want := range []string{
		"is registered and fingerprinted healthy", "the new allocation is current and healthy",
		"hostpath-b is unhealthy", "hostpath-b is healthy again",
		"created volume demo-db on plugin hostpath-a through its controller (CreateVolume)",
		"mounted demo-db for writer alloc web-1 (claim, stage, publish), bind-mounted at ",
		"and wrote hello.txt through it",
		"refused a second writer, web-2", "already has a writer",
		"reader alloc report-1 joined demo-db read-only on the same stage (publish only)",
		`and read hello.txt: "written through the mount\n"`,
		"stopped the agent; the plugin processes keep running and demo-db stays mounted",
		"started a new agent in-process on the same data dir",
		"the new agent's durable record of demo-db holds its stage (staged) and the publishes for report-1 and web-1",
		"unmounted demo-db for web-1 (unpublish, release its claim; the stage stays for report-1)",
		"unmounted demo-db for report-1 (unpublish, unstage, release its claim), the last alloc on this node",
		"nothing is mounted under ",
		"deleted volume demo-db on plugin hostpath-a (DeleteVolume) and from the catalog",
		"[9/9]", "All stopped cleanly",
	} {
		require.Contains(t, stdout, want)
	}
	// The volume's lines come in the order of its life.
	var at []int
	for _, line := range []string{"created volume demo-db", "mounted demo-db for writer", "reader alloc report-1 joined",
		"stopped the agent", "started a new agent", "unmounted demo-db for web-1", "unmounted demo-db for report-1", "deleted volume demo-db"} {
		at = append(at, strings.Index(stdout, line))
	}
	require.IsIncreasing(t, at, "the volume's steps in order:\n%s", stdout)

	dir := regexp.MustCompile(`a tour in (\S+)`).FindStringSubmatch(stdout)
	require.Len(t, dir, 2, "the demo names its temp dir")
	mounts, err := mountinfo.PointsUnder(mountinfo.DefaultPath, dir[1])
	require.NoError(t, err)
	require.Empty(t, mounts, "nothing the demo mounted stays mounted")
	require.NoDirExists(t, dir[1], "the demo removes its temp dir")
	for _, pid := range regexp.MustCompile(`\(pid (\d+)\)`).FindAllStringSubmatch(stdout, -1) {
		n, err := strconv.Atoi(pid[1])
		require.NoError(t, err)
		require.ErrorIs(t, syscall.Kill(n, 0), syscall.ESRCH, "plugin process %d still runs", n)
	}
}

// TestTheDemoRunsWithoutRoot runs the demo as an unprivileged user: the
// hostpath plugin links instead of bind-mounting, the reader's read-only
// mount is refused and said so, and the rest of the volume's life, the
// agent restart among it, still runs to the end.
func TestTheDemoRunsWithoutRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the demo as another user")
	}
	// The test binary's dir is private to root: copy it where nobody can run it.
	bin, err := os.MkdirTemp("", "pvnobody")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(bin) })
	require.NoError(t, os.Chmod(bin, 0o755))
	exe := filepath.Join(bin, "plugvisor")
	b, err := os.ReadFile(binary)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(exe, b, 0o755))
	cmd := exec.Command(exe, "demo")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "demo as nobody failed:\n%s\n%s", &stdout, &stderr)
	for _, want := range []string{
		"linked (not root: the hostpath plugin falls back to a symlink instead of a bind mount)",
		"reader alloc report-1 cannot join read-only without root",
		"the publishes for web-1\n",
		"unmounted demo-db for web-1 (unpublish, unstage, release its claim), the last alloc on this node",
		"deleted volume demo-db on plugin hostpath-a", "All stopped cleanly",
	} {
		require.Contains(t, stdout.String(), want)
	}
}

func TestVolumesThroughTheCLI(t *testing.T) {
	dir := dataDir(t)
	startAgent(t, dir, "-fingerprint-interval", "200ms")
	plugin := exec.Command(binary, "hostpath-csi", "-endpoint", dir+"/plugins/hp.sock", "-name", "hp",
		"-node-id", "n1", "-root", dir+"/hp", "-symlink-fallback")
	require.NoError(t, plugin.Start())
	t.Cleanup(func() { _ = plugin.Process.Signal(syscall.SIGTERM); _ = plugin.Wait() })
	require.Eventually(t, func() bool {
		out, _, _ := cli(t, "volume", "register", "-data-dir", dir, "-id", "v1", "-plugin", "hp", "-access-mode", "single-node-writer")
		return strings.Contains(out, "schedulable: true")
	}, settle, 100*time.Millisecond, "the volume's plugin never became healthy in the catalog")

	list, _, code := cli(t, "volume", "list", "-data-dir", dir)
	require.Zero(t, code)
	require.Contains(t, list, "v1")
	_, stderr, code := cli(t, "volume", "mount", "-data-dir", dir, "v1", "web-1")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "does not exist", "the plugin refuses a volume it never created, and says so")
	_, stderr, code = cli(t, "volume", "register", "-data-dir", dir, "-id", "../x", "-plugin", "hp", "-access-mode", "single-node-writer")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "path separator")
	_, stderr, code = cli(t, "volume", "register", "-data-dir", dir, "-id", "v2", "-plugin", "hp", "-access-mode", "sometimes")
	require.Equal(t, 2, code, "refused before any request")
	require.Contains(t, stderr, `-access-mode "sometimes": want one of`)
	status, _, code := cli(t, "volume", "status", "-data-dir", dir, "-json", "v1")
	require.Zero(t, code)
	require.Contains(t, status, `"plugin_id": "hp"`)

	var health api.Health
	getJSON(t, apiClient(dir), "/v1/health", &health)
	require.Equal(t, "ok", health.Status, health.Reasons)
	require.Equal(t, api.InstanceCounts{Healthy: 2, Total: 2}, health.CSIInstances, "the plugin's controller and node instances")
	require.Equal(t, 1, health.Discovered)

	resp, err := apiClient(dir).Get("http://plugvisor/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	metrics, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`plugvisor_plugin_healthy{name="hp",type="csi-node"} 1`,
		`plugvisor_fingerprint_seconds_count{name="hp",type="csi-node"}`,
		`plugvisor_mount_operations_total{op="mount",result="error"} 1`,
	} {
		require.Contains(t, string(metrics), want)
	}
}
