package kubeletreg_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	regapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	actorprobe "github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/kubeletreg"
	"github.com/plugvisor/plugvisor/kubeletreg/kubeletregtest"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/registry/registrytest"
	"github.com/plugvisor/plugvisor/supervisor"
)

func TestMain(m *testing.M) { hostpathtest.Main(m) }

// wait is how long a test waits for a condition: generous, for a loaded machine.
const wait = 30 * time.Second

// env is a registry and a watcher on one registration directory.
type env struct {
	dir      string
	registry *registry.Registry
	watcher  *kubeletreg.Watcher
	metrics  *countingMetrics
	logs     *actorprobe.LogBuffer
}

func newEnv(t *testing.T, tweak func(*kubeletreg.Config)) *env {
	t.Helper()
	system := actorprobe.NewSystem(t)
	e := &env{dir: hostpathtest.TempDir(t), metrics: &countingMetrics{counts: map[string]int{}}, logs: &actorprobe.LogBuffer{}}
	e.registry = registrytest.New(t, system, registry.Config{Logger: actorprobe.Logger(t)})
	cfg := kubeletreg.Config{
		Dirs: []string{e.dir}, Registry: e.registry, Metrics: e.metrics, Timeout: 2 * time.Second,
		Logger: hclog.New(&hclog.LoggerOptions{Output: e.logs, Level: hclog.Info}),
		Retry:  supervisor.Spec{MaxRestarts: 2, Within: time.Minute, InitialDelay: 50 * time.Millisecond, MaxDelay: 100 * time.Millisecond},
	}
	if tweak != nil {
		tweak(&cfg)
	}
	var err error
	e.watcher, err = kubeletreg.Start(system, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.watcher.Shutdown()) })
	return e
}

// allocation returns plugin (ptype, name)'s allocation alloc, if registered.
func (e *env) allocation(ptype, name, alloc string) *messages.PluginInfo {
	for _, p := range e.registry.Snapshot().Allocations(ptype, name) {
		if p.GetAllocId() == alloc {
			return p
		}
	}
	return nil
}

// plugin returns what the watcher says of socket.
func (e *env) plugin(socket string) *messages.DiscoveredPlugin {
	for _, p := range e.watcher.Plugins() {
		if p.GetSource() == socket {
			return p
		}
	}
	return nil
}

// nothingRegistered checks that the registry holds no CSI plugin at all.
func (e *env) nothingRegistered(t *testing.T) {
	t.Helper()
	require.Empty(t, e.registry.ListPlugins(csi.TypeNode))
	require.Empty(t, e.registry.ListPlugins(csi.TypeController))
}

type countingMetrics struct {
	mu     sync.Mutex
	counts map[string]int
}

func (m *countingMetrics) Refused(reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.counts[reason]++
}

func (m *countingMetrics) count(reason string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.counts[reason]
}

// sidecar is kubeletregtest's, shorter.
type sidecar = kubeletregtest.Sidecar

func serveSidecar(t *testing.T, socket string, info *regapi.PluginInfo, hang bool) *sidecar {
	if hang {
		return kubeletregtest.ServeHanging(t, socket)
	}
	return kubeletregtest.Serve(t, socket, info)
}

var csiInfo = kubeletregtest.CSIInfo

func servePlugin(t *testing.T, name string, mode hostpath.Mode) *hostpathtest.Server {
	return hostpathtest.Serve(t, hostpath.Config{Name: name, NodeID: "n1", Root: hostpathtest.TempDir(t), Mode: mode, SymlinkFallback: true})
}

func TestARegistrationSocketRegistersItsPluginAndItsRemovalDeregistersIt(t *testing.T) {
	e := newEnv(t, nil)
	plugin := servePlugin(t, "hp.example.com", hostpath.ModeMonolith)
	socket := filepath.Join(e.dir, "hp.example.com-reg.sock")
	sc := serveSidecar(t, socket, csiInfo("hp.example.com", plugin.Endpoint), false)

	st := sc.Status(t, wait)
	require.True(t, st.GetPluginRegistered(), st.GetError())
	alloc := kubeletreg.AllocID(socket)
	for _, ptype := range []string{csi.TypeNode, csi.TypeController} {
		p := e.allocation(ptype, "hp.example.com", alloc)
		require.NotNil(t, p, "%s is not registered", ptype)
		require.Equal(t, plugin.Endpoint, p.GetConnection().GetSocketPath())
		require.Equal(t, socket, p.GetOptions()[kubeletreg.OptionSocket])
	}
	require.Eventually(t, func() bool {
		return e.plugin(socket).GetState() == messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_REGISTERED
	}, wait, 10*time.Millisecond)
	require.Equal(t, "hp.example.com", e.plugin(socket).GetName())
	require.Equal(t, kubeletreg.KindRegistration, e.plugin(socket).GetKind())

	sc.Stop()
	require.Eventually(t, func() bool {
		return e.allocation(csi.TypeNode, "hp.example.com", alloc) == nil &&
			e.allocation(csi.TypeController, "hp.example.com", alloc) == nil && e.plugin(socket) == nil
	}, wait, 10*time.Millisecond)
}

func TestANodeOnlyPluginRegistersAsANodePluginOnly(t *testing.T) {
	e := newEnv(t, nil)
	plugin := servePlugin(t, "node-only", hostpath.ModeNode)
	socket := filepath.Join(e.dir, "node-only-reg.sock")
	sc := serveSidecar(t, socket, csiInfo("node-only", "unix://"+plugin.Endpoint), false)

	require.True(t, sc.Status(t, wait).GetPluginRegistered())
	require.NotNil(t, e.allocation(csi.TypeNode, "node-only", kubeletreg.AllocID(socket)))
	require.Empty(t, e.registry.ListPlugins(csi.TypeController))
}

func TestASidecarThatRestartsRegistersTheSameAllocationAgain(t *testing.T) {
	e := newEnv(t, nil)
	plugin := servePlugin(t, "hp", hostpath.ModeNode)
	socket := filepath.Join(e.dir, "hp-reg.sock")
	sc := serveSidecar(t, socket, csiInfo("hp", plugin.Endpoint), false)
	require.True(t, sc.Status(t, wait).GetPluginRegistered())
	sc.Stop()
	require.Eventually(t, func() bool { return len(e.registry.ListPlugins(csi.TypeNode)) == 0 }, wait, 10*time.Millisecond)

	sc = serveSidecar(t, socket, csiInfo("hp", plugin.Endpoint), false)
	require.True(t, sc.Status(t, wait).GetPluginRegistered(), "a socket seen between its bind and its listen is tried again, not told it failed")
	require.NotNil(t, e.allocation(csi.TypeNode, "hp", kubeletreg.AllocID(socket)))
}

func TestBadRegistrationsAreRefusedAndToldWhy(t *testing.T) {
	plugin := servePlugin(t, "hp", hostpath.ModeMonolith)
	file := filepath.Join(hostpathtest.TempDir(t), "not-a-socket")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	long := "/" + strings.Repeat("x", 120) + "/csi.sock"
	for _, tc := range []struct {
		name   string
		info   *regapi.PluginInfo
		reason string
		says   string
	}{
		{"a device plugin", &regapi.PluginInfo{Type: regapi.DevicePlugin, Name: "hp", Endpoint: plugin.Endpoint, SupportedVersions: []string{"1.0.0"}},
			kubeletreg.ReasonType, `plugin type "DevicePlugin" is not supported`},
		{"a name with a slash", csiInfo("a/b", plugin.Endpoint), kubeletreg.ReasonName, "plugin name"},
		{"a name of dots", csiInfo("..", plugin.Endpoint), kubeletreg.ReasonName, "plugin name"},
		{"CSI 0.3 only", &regapi.PluginInfo{Type: regapi.CSIPlugin, Name: "hp", Endpoint: plugin.Endpoint, SupportedVersions: []string{"0.3.0"}},
			kubeletreg.ReasonVersion, "none of them 1.x"},
		{"CSI 2 only", &regapi.PluginInfo{Type: regapi.CSIPlugin, Name: "hp", Endpoint: plugin.Endpoint, SupportedVersions: []string{"2.0.0"}},
			kubeletreg.ReasonVersion, "none of them 1.x"},
		{"no versions", &regapi.PluginInfo{Type: regapi.CSIPlugin, Name: "hp", Endpoint: plugin.Endpoint},
			kubeletreg.ReasonVersion, "none of them 1.x"},
		{"a TCP endpoint", csiInfo("hp", "tcp://127.0.0.1:1"), kubeletreg.ReasonEndpoint, "is not a unix socket"},
		{"a relative endpoint", csiInfo("hp", "csi.sock"), kubeletreg.ReasonEndpoint, "must be absolute"},
		{"an endpoint too long", csiInfo("hp", long), kubeletreg.ReasonEndpoint, "over the unix limit"},
		{"an endpoint that is a regular file", csiInfo("hp", file), kubeletreg.ReasonEndpoint, "not a socket"},
		{"an endpoint whose plugin has another name", csiInfo("other", plugin.Endpoint), kubeletreg.ReasonMismatch, `calls itself "hp"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			socket := filepath.Join(e.dir, "reg.sock")
			sc := serveSidecar(t, socket, tc.info, false)
			st := sc.Status(t, wait)
			require.False(t, st.GetPluginRegistered())
			require.Contains(t, st.GetError(), tc.says)
			require.Contains(t, st.GetError(), socket)
			e.nothingRegistered(t)
			require.Eventually(t, func() bool {
				return e.plugin(socket).GetState() == messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_FAILED
			}, wait, 10*time.Millisecond)
			require.Equal(t, 1, e.metrics.count(tc.reason))
			require.Contains(t, e.plugin(socket).GetError(), tc.says)
			require.Contains(t, e.logs.String(), "registration refused")
			require.Contains(t, e.logs.String(), "reason="+tc.reason)
		})
	}
}

func TestASocketThatHangsOrAnswersGarbageIsRefusedWithinTheTimeoutAndTriedAgain(t *testing.T) {
	for _, tc := range []struct {
		name  string
		serve func(t *testing.T, socket string) *sidecar
	}{
		{"hangs in GetInfo", func(t *testing.T, socket string) *sidecar { return serveSidecar(t, socket, nil, true) }},
		{"accepts and never answers", func(t *testing.T, socket string) *sidecar { rawSocket(t, socket, nil); return nil }},
		{"answers garbage", func(t *testing.T, socket string) *sidecar {
			rawSocket(t, socket, []byte("HTTP/1.1 200 OK\r\n\r\ngarbage"))
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(c *kubeletreg.Config) { c.Timeout = 200 * time.Millisecond })
			socket := filepath.Join(e.dir, "reg.sock")
			hanging := tc.serve(t, socket)
			require.Eventually(t, func() bool { return e.metrics.count(kubeletreg.ReasonUnreachable) >= 2 }, wait, 10*time.Millisecond,
				"the registration is tried again after a backoff")
			e.nothingRegistered(t)
			p := e.plugin(socket)
			require.Equal(t, messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_ACTIVATING, p.GetState())
			require.Contains(t, p.GetError(), "GetInfo")
			require.Contains(t, e.logs.String(), "reason=unreachable")
			if hanging != nil {
				require.Empty(t, hanging.Statuses, "a socket that may answer later is not told it failed: node-driver-registrar would exit")
			}
		})
	}
}

// rawSocket listens at socket and, for each connection, writes answer (if
// any) and then holds the connection until the test ends.
func rawSocket(t *testing.T, socket string, answer []byte) {
	l, err := net.Listen("unix", socket)
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			if answer != nil {
				_, _ = c.Write(answer)
			}
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
}

func TestTwoSocketsClaimingOneNameWithDifferentEndpointsRegisterOnlyTheFirst(t *testing.T) {
	e := newEnv(t, nil)
	first, second := servePlugin(t, "hp", hostpath.ModeNode), servePlugin(t, "hp", hostpath.ModeNode)
	a := serveSidecar(t, filepath.Join(e.dir, "a-reg.sock"), csiInfo("hp", first.Endpoint), false)
	require.True(t, a.Status(t, wait).GetPluginRegistered())

	b := serveSidecar(t, filepath.Join(e.dir, "b-reg.sock"), csiInfo("hp", second.Endpoint), false)
	st := b.Status(t, wait)
	require.False(t, st.GetPluginRegistered())
	require.Contains(t, st.GetError(), "already registered by registration socket "+a.Socket)
	require.Eventually(t, func() bool { return e.metrics.count(kubeletreg.ReasonConflict) == 1 }, wait, 10*time.Millisecond)
	allocs := e.registry.Snapshot().Allocations(csi.TypeNode, "hp")
	require.Len(t, allocs, 1)
	require.Equal(t, first.Endpoint, allocs[0].GetConnection().GetSocketPath())

	a.Stop()
	require.True(t, b.Status(t, wait).GetPluginRegistered(), "the second registers once the first is gone")
	require.Eventually(t, func() bool {
		allocs := e.registry.Snapshot().Allocations(csi.TypeNode, "hp")
		return len(allocs) == 1 && allocs[0].GetConnection().GetSocketPath() == second.Endpoint
	}, wait, 10*time.Millisecond)
}

func TestARegistrationOfAPluginTheAPIRegisteredTakesOverAsTheNewerAllocation(t *testing.T) {
	e := newEnv(t, nil)
	plugin := servePlugin(t, "hp", hostpath.ModeNode)
	require.NoError(t, e.registry.RegisterPlugin(&messages.PluginInfo{Type: csi.TypeNode, Name: "hp", AllocId: "api-1",
		Connection: &messages.ConnectionInfo{SocketPath: plugin.Endpoint}}))
	socket := filepath.Join(e.dir, "hp-reg.sock")
	sc := serveSidecar(t, socket, csiInfo("hp", plugin.Endpoint), false)
	require.True(t, sc.Status(t, wait).GetPluginRegistered())
	current, ok := e.registry.Snapshot().Current(csi.TypeNode, "hp")
	require.True(t, ok)
	require.Equal(t, kubeletreg.AllocID(socket), current.GetAllocId())

	sc.Stop()
	require.Eventually(t, func() bool {
		current, ok := e.registry.Snapshot().Current(csi.TypeNode, "hp")
		return ok && current.GetAllocId() == "api-1"
	}, wait, 10*time.Millisecond, "the API's allocation is current again")
}

func TestARegistrationLeftByAnEarlierRunWhoseSocketIsGoneIsRemovedAtStart(t *testing.T) {
	system := actorprobe.NewSystem(t)
	reg := registrytest.New(t, system, registry.Config{})
	dir := hostpathtest.TempDir(t)
	stale := filepath.Join(dir, "gone-reg.sock")
	require.NoError(t, reg.RegisterPlugin(&messages.PluginInfo{Type: csi.TypeNode, Name: "gone", AllocId: kubeletreg.AllocID(stale),
		Connection: &messages.ConnectionInfo{SocketPath: "/run/gone.sock"}, Options: map[string]string{kubeletreg.OptionSocket: stale}}))
	w, err := kubeletreg.Start(system, kubeletreg.Config{Dirs: []string{dir}, Registry: reg})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, w.Shutdown()) })
	require.Eventually(t, func() bool { return len(reg.ListPlugins(csi.TypeNode)) == 0 }, wait, 10*time.Millisecond)
}

func TestAConfigWithoutDirsOrRegistryOrWithARelativeDirIsRefused(t *testing.T) {
	system := actorprobe.NewSystem(t)
	_, err := kubeletreg.Start(system, kubeletreg.Config{Dirs: []string{"plugins_registry"}, Timeout: -time.Second})
	require.ErrorIs(t, err, kubeletreg.ErrInvalidConfig)
	require.ErrorIs(t, err, errclass.Invalid)
	require.False(t, strings.HasPrefix(err.Error(), "kubeletreg: "), "no package prefix: %v", err)
	for _, says := range []string{"a registry is required", `registration directory "plugins_registry" is not absolute`, "Timeout is -1s"} {
		require.Contains(t, err.Error(), says)
	}
}
