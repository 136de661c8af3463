package chaos_test

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
	"sync"
	"sync/atomic"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/internal/racelog"
)

// The fleet's timing: a lease of 3 s, a fence margin of 2 s and a GC
// grace of 8 s, so that a dead node's claims are freed within seconds,
// and the GC looks at down nodes every second.
const (
	leaseTTL    = 3 * time.Second
	fenceMargin = 2 * time.Second
	gcGrace     = 8 * time.Second
	// fenceBound is how long a writable mount may outlive its claim: a
	// node fences once its lease or its watch has been silent for the TTL,
	// within the margin; a claim freed while the node hears etcd is seen
	// by its watch at once. A loaded machine adds its delays.
	fenceBound = leaseTTL + fenceMargin + 3*time.Second
	// settle bounds the waits of the harness on a loaded machine.
	settle = 90 * time.Second
)

// chaosFleet is the fleet under test: an etcd process, and nodes, each an
// agent process with its own hostpath plugin process on one shared root.
// Each node reaches etcd through a proxy of its own (an etcd cut), and the
// other members reach its member through another (a member cut).
type chaosFleet struct {
	t     *testing.T
	dir   string
	root  string
	races string
	etcd  *etcdServer
	nodes []*chaosNode
	// volumes are the single-node-writer volumes the clients use; shared
	// are multi-node-multi-writer ones, only claimed.
	volumes []string
	shared  []string
	procs   procs
	admin   *clientv3.Client
}

// etcdServer is the fleet's etcd: one `plugvisor etcd` process, restarted
// on the same ports, and on a new data dir after a restore.
type etcdServer struct {
	dir          string
	client, peer string
	proc         *proc
	restores     int
}

// chaosNode is one node of the fleet.
type chaosNode struct {
	id, dir             string
	etcdProxy, member   *etcdtest.Proxy
	listen              string
	agent, plugin       *proc
	api                 *http.Client
	mu                  sync.Mutex
	agentRuns, restarts int
	// serving is when the node's agent last began to serve its API, nil
	// while it is down: an agent that does not run fences nothing, and
	// its start checks its mounts first.
	serving atomic.Pointer[time.Time]
}

// servingSince is when the node's agent began to serve, and whether it
// serves now.
func (n *chaosNode) servingSince() (time.Time, bool) {
	if at := n.serving.Load(); at != nil && n.currentAgent().alive() {
		return *at, true
	}
	return time.Time{}, false
}

// served notes that the node's agent serves from now.
func (n *chaosNode) served() {
	now := time.Now()
	n.serving.Store(&now)
}

// newChaosFleet starts etcd and n nodes, and creates and registers vols
// single-node-writer volumes.
func newChaosFleet(t *testing.T, n, vols int) *chaosFleet {
	t.Helper()
	dir, err := os.MkdirTemp("", "pvc")
	require.NoError(t, err)
	var out string
	f := &chaosFleet{t: t, dir: dir, root: filepath.Join(dir, "storage"), races: filepath.Join(dir, "races")}
	require.NoError(t, os.MkdirAll(f.races, 0o700))
	t.Cleanup(f.close)
	f.etcd = &etcdServer{dir: filepath.Join(dir, "etcd"), client: "http://" + freeAddress(t), peer: "http://" + freeAddress(t)}
	out, err = cli("keyring", "generate", f.keyring())
	require.NoError(t, err, out)
	f.startEtcd()
	f.admin, err = clientv3.New(clientv3.Config{Endpoints: []string{f.etcd.client}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	for i := 1; i <= n; i++ {
		node := &chaosNode{id: fmt.Sprintf("n%d", i), dir: filepath.Join(dir, fmt.Sprintf("n%d", i)), listen: freeAddress(t)}
		node.etcdProxy = etcdtest.NewProxy(t, strings.TrimPrefix(f.etcd.client, "http://"))
		node.member = etcdtest.NewProxy(t, node.listen)
		require.NoError(t, os.MkdirAll(filepath.Join(node.dir, "plugins"), 0o700))
		node.api = apiClient(node.dir)
		f.nodes = append(f.nodes, node)
		f.startPlugin(node)
		f.startAgent(node)
	}
	for _, node := range f.nodes {
		f.waitAgent(node)
	}
	for i := 1; i <= vols; i++ {
		f.volumes = append(f.volumes, f.createVolume(fmt.Sprintf("sw%d", i), "single-node-writer"))
	}
	for i := 1; i <= 12; i++ {
		f.shared = append(f.shared, f.registerVolume(fmt.Sprintf("mw%d", i), "multi-node-multi-writer"))
	}
	return f
}

// startEtcd starts etcd on its data dir and waits until it serves.
func (f *chaosFleet) startEtcd() {
	f.t.Helper()
	p, err := start("etcd", f.races, "etcd", "-insecure", "-data-dir", f.etcd.dir, "-listen", f.etcd.client, "-peer", f.etcd.peer)
	require.NoError(f.t, err)
	f.etcd.proc = f.procs.add(p)
	f.waitOutput(p, "etcd ready")
}

// waitOutput waits until p's output holds want.
func (f *chaosFleet) waitOutput(p *proc, want string) {
	f.t.Helper()
	require.Eventually(f.t, func() bool { return strings.Contains(p.out.String(), want) || !p.alive() }, settle, 20*time.Millisecond)
	require.True(f.t, p.alive(), "%s ended: %s", p.name, p.out.String())
}

// startPlugin starts node's hostpath plugin, node and controller, on the
// shared root, with the node's own CSI node ID.
func (f *chaosFleet) startPlugin(n *chaosNode) {
	f.t.Helper()
	p, err := startPluginProc(f, n)
	require.NoError(f.t, err)
	n.plugin = p
}

// startPluginProc starts node's hostpath plugin process.
func startPluginProc(f *chaosFleet, n *chaosNode) (*proc, error) {
	p, err := start("plugin-"+n.id, f.races, "hostpath-csi", "-name", "hp", "-endpoint", n.socket(), "-root", f.root, "-node-id", n.id)
	if err != nil {
		return nil, err
	}
	return f.procs.add(p), nil
}

// node is the node of ID id.
func (f *chaosFleet) node(id string) *chaosNode {
	for _, n := range f.nodes {
		if n.id == id {
			return n
		}
	}
	panic("no node " + id)
}

// socket is the node's plugin socket, where its agent's discovery finds it.
func (n *chaosNode) socket() string { return filepath.Join(n.dir, "plugins", "hp.sock") }

// agentArgs are the flags of node's agent, with id as its node ID and dir
// as its data dir.
func (f *chaosFleet) agentArgs(n *chaosNode, id, dir string) []string {
	return []string{"agent", "-data-dir", dir, "-node-id", id, "-log-level", "info",
		"-cluster-etcd", "http://" + n.etcdProxy.Address(), "-cluster-address", n.listen, "-cluster-advertise", n.member.Address(),
		"-cluster-insecure", "-cluster-lease-ttl", leaseTTL.String(), "-cluster-fence-margin", fenceMargin.String(),
		"-cluster-gc-interval", "1s", "-cluster-gc-grace", gcGrace.String(), "-cluster-keyring", f.keyring()}
}

// keyring is the fleet's keyring file: its records in etcd are sealed, and
// its members' requests signed.
func (f *chaosFleet) keyring() string { return filepath.Join(f.dir, "keyring") }

// startAgent starts node's agent; waitAgent waits until its API answers.
func (f *chaosFleet) startAgent(n *chaosNode) {
	f.t.Helper()
	p, err := start("agent-"+n.id, f.races, f.agentArgs(n, n.id, n.dir)...)
	require.NoError(f.t, err)
	n.mu.Lock()
	n.agent, n.agentRuns = f.procs.add(p), n.agentRuns+1
	n.mu.Unlock()
}

func (f *chaosFleet) waitAgent(n *chaosNode) {
	f.t.Helper()
	agent := n.currentAgent()
	require.Eventually(f.t, func() bool {
		var h map[string]any
		return n.call(context.Background(), "GET", "/v1/health", nil, &h) == nil || !agent.alive()
	}, settle, 50*time.Millisecond)
	require.True(f.t, agent.alive(), "agent %s ended at start: %s", n.id, agent.out.String())
	if _, serving := n.servingSince(); !serving {
		n.served()
	}
}

func (n *chaosNode) currentAgent() *proc {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.agent
}

// createVolume creates a single-node-writer volume with the plugin of the
// first node (the plugins share one root, so every node's sees it) and
// registers it with no topology, so that every node may mount it; the
// volume's ID is the plugin's.
func (f *chaosFleet) createVolume(name, mode string) string {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	c, err := csi.Dial(ctx, f.nodes[0].socket(), csi.Options{})
	require.NoError(f.t, err)
	created, err := c.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csipb.VolumeCapability{{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csiModes[mode]},
	}}})
	require.NoError(f.t, c.Close())
	require.NoError(f.t, err)
	return f.registerVolume(created.GetVolume().GetVolumeId(), mode)
}

// registerVolume registers volume id of the plugin, and waits until it is
// schedulable on every node. A volume only claimed, never mounted, needs
// nothing of the plugin (the hostpath plugin has no multi-node mode).
func (f *chaosFleet) registerVolume(id, mode string) string {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	body := map[string]any{"id": id, "plugin_id": "hp", "access_mode": mode, "attachment_mode": "file-system"}
	require.Eventually(f.t, func() bool {
		var v map[string]any
		if f.nodes[0].call(ctx, "POST", "/v1/volumes", body, &v) != nil {
			return false
		}
		err := f.nodes[0].call(ctx, "GET", "/v1/volumes/default/"+id, nil, &v)
		return err == nil && v["schedulable"] == true && v["nodes_healthy"] == float64(len(f.nodes))
	}, settle, 100*time.Millisecond, "volume %s registered and schedulable on every node", id)
	return id
}

// csiModes are the CSI access modes of the fleet's volumes.
var csiModes = map[string]csipb.VolumeCapability_AccessMode_Mode{
	"single-node-writer":      csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
	"multi-node-multi-writer": csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER,
}

// close stops every process, unmounts what is left under the fleet's dir,
// and removes it.
func (f *chaosFleet) close() {
	if f.admin != nil {
		_ = f.admin.Close()
	}
	for _, n := range f.nodes {
		if a := n.currentAgent(); a != nil {
			if err := a.stop(30 * time.Second); err != nil && a.alive() {
				f.t.Errorf("agent %s: %v", n.id, err)
			}
		}
	}
	for _, p := range f.procs.all {
		_ = p.stop(10 * time.Second)
	}
	if out, err := exec.Command("sh", "-c", "grep -o ' "+f.dir+"[^ ]*' /proc/self/mountinfo | sort -r | xargs -r -n1 umount -l").CombinedOutput(); err != nil {
		f.t.Logf("unmounting what is left: %v: %s", err, out)
	}
	checkRaces(f.t, f.races)
	if !f.t.Failed() {
		_ = os.RemoveAll(f.dir)
	} else {
		f.t.Logf("the fleet's files are kept in %s", f.dir)
	}
}

// checkRaces fails the test on a race report of our code, and logs those
// wholly inside other modules (see package racelog).
func checkRaces(t *testing.T, dir string) {
	ours, theirs, err := racelog.Reports(dir)
	if err != nil {
		t.Error(err)
	}
	for _, race := range theirs {
		t.Log("a data race inside another module: " + race)
	}
	if len(ours) > 0 {
		t.Error("data races in our code:\n" + strings.Join(ours, "\n"))
	}
}

// apiClient talks HTTP to the agent of dir over its unix socket.
func apiClient(dir string) *http.Client {
	socket := filepath.Join(dir, "plugvisor.sock")
	return &http.Client{
		Timeout: 3 * time.Minute,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", socket)
			},
		},
	}
}

// apiError is an error answer of an agent.
type apiError struct {
	status     int
	code, text string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.status, e.code, e.text) }

// call sends a request to the node's agent and decodes its answer into
// out; an error answer is an *apiError.
func (n *chaosNode) call(ctx context.Context, method, path string, body, out any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://plugvisor"+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.api.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var e struct{ Error, Code string }
		_ = json.Unmarshal(b, &e)
		return &apiError{status: resp.StatusCode, code: e.Code, text: e.Error}
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// cli runs a plugvisor command and returns its output and error.
func cli(args ...string) (string, error) {
	out, err := exec.Command(binary, args...).CombinedOutput()
	return string(out), err
}

// freeAddress is a loopback host:port that was free a moment ago.
func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}
