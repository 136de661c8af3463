package dockervolume_test

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/docker/go-plugins-helpers/volume"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/discovery"
	"github.com/plugvisor/plugvisor/dockervolume"
	"github.com/plugvisor/plugvisor/dockervolume/dockervolumetest"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
	"github.com/plugvisor/plugvisor/supervisor"
)

// wait is how long a test waits for what must happen: long enough for a
// loaded machine, and a wait ends as soon as what it waits for happens.
const wait = 30 * time.Second

// managerEnv is a registry and a docker-volume manager whose health
// reports reach health, a probe subscribed to the manager.
type managerEnv struct {
	system   *actor.ActorSystem
	registry *registry.Registry
	manager  *dockervolume.Manager
	health   *probe.Probe
	dir      string // a short directory for sockets
}

func newManagerEnv(t *testing.T) *managerEnv {
	t.Helper()
	e := &managerEnv{system: probe.NewSystem(t)}
	dir, err := os.MkdirTemp("", "pv")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	e.dir = dir
	bucket, err := storage.NewMemory().Bucket(registry.BucketName)
	require.NoError(t, err)
	e.registry, err = registry.New(e.system, registry.Config{Bucket: bucket, Logger: probe.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.registry.Shutdown()) })
	e.manager, err = dockervolume.Start(e.system, dockervolume.Config{
		Registry: e.registry, Logger: probe.Logger(t), ResyncInterval: 200 * time.Millisecond,
		HealthInterval: 50 * time.Millisecond, HealthTimeout: time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.manager.Shutdown()) })
	e.health = probe.New(t, e.system)
	e.health.Send(e.manager.PID(), &messages.SubscribeDockerVolume{Subscriber: e.health.PID(), Replay: true})
	return e
}

// expect waits, within timeout, for a health report about alloc of plugin
// name that match accepts.
func (e *managerEnv) expect(t *testing.T, timeout time.Duration, name, alloc string, match func(*messages.DockerVolumePluginHealth) bool) *messages.DockerVolumePluginHealth {
	t.Helper()
	return probe.FishFor(t, e.health, timeout, func(h *messages.DockerVolumePluginHealth) bool {
		return h.GetName() == name && h.GetAllocId() == alloc && match(h)
	})
}

// about matches a health report about alloc of plugin name that match
// accepts.
func (e *managerEnv) about(name, alloc string, match func(*messages.DockerVolumePluginHealth) bool) probe.Matcher {
	return probe.Match(func(h *messages.DockerVolumePluginHealth) bool {
		return h.GetName() == name && h.GetAllocId() == alloc && match(h)
	})
}

func healthy(h *messages.DockerVolumePluginHealth) bool   { return h.GetHealthy() }
func unhealthy(h *messages.DockerVolumePluginHealth) bool { return !h.GetHealthy() }
func final(h *messages.DockerVolumePluginHealth) bool     { return h.GetFinal() }

// register registers alloc of volume plugin name at socket.
func (e *managerEnv) register(t *testing.T, name, alloc, socket string) {
	t.Helper()
	require.NoError(t, e.registry.RegisterPlugin(&messages.PluginInfo{Type: dockervolume.PluginType, Name: name,
		AllocId: alloc, Connection: &messages.ConnectionInfo{SocketPath: socket}}))
}

// httpServer serves an http.Handler the way go-plugins-helpers handlers serve.
type httpServer struct{ http.Handler }

func (s httpServer) Serve(l net.Listener) error {
	srv := &http.Server{Handler: s.Handler, ReadHeaderTimeout: time.Second}
	return srv.Serve(l)
}

// fakeVolumePlugin answers the activation handshake, and Capabilities and
// List with the given status and body.
func fakeVolumePlugin(capsStatus int, capsBody string, listStatus int, listBody string) httpServer {
	mux := http.NewServeMux()
	write := func(status int, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", discovery.MediaTypeV11)
			w.WriteHeader(status)
			_, _ = w.Write([]byte(body))
		}
	}
	mux.HandleFunc("/Plugin.Activate", write(http.StatusOK, `{"Implements": ["VolumeDriver"]}`))
	mux.HandleFunc("/VolumeDriver.Capabilities", write(capsStatus, capsBody))
	mux.HandleFunc("/VolumeDriver.List", write(listStatus, listBody))
	return httpServer{mux}
}

func TestADiscoveredVolumePluginIsHealthyWithinOneSecondAndStopsWhenItGoes(t *testing.T) {
	e := newManagerEnv(t)
	d, err := discovery.Start(e.system, discovery.Config{
		Dirs: discovery.Dirs{Sockets: []string{e.dir}}, Registry: e.registry, Logger: probe.Logger(t),
		RescanInterval: 200 * time.Millisecond, ActivateTimeout: time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Shutdown()) })

	socket := filepath.Join(e.dir, "vol.sock")
	start := time.Now()
	stop := dockervolumetest.ServeAt(t, socket, volume.NewHandler(dockervolumetest.NewMemDriver(dockervolume.ScopeGlobal)))
	alloc := discovery.AllocID(socket)
	h := e.expect(t, wait, "vol", alloc, healthy)
	t.Logf("healthy %v after the socket appeared", time.Since(start))
	require.Equal(t, dockervolume.ScopeGlobal, h.GetScope())
	require.Equal(t, "VolumeDriver.Capabilities answered", h.GetDescription())
	require.Len(t, e.manager.Plugins(), 1)

	watcher := probe.New(t, e.system)
	watcher.Watch(t, h.GetInstance())
	stop()
	got := e.expect(t, wait, "vol", alloc, final)
	require.Equal(t, dockervolume.StoppedDescription, got.GetDescription())
	watcher.ExpectTerminated(t, h.GetInstance(), wait)
	_, registered := e.registry.Snapshot().Current(dockervolume.PluginType, "vol")
	require.False(t, registered)
	require.Empty(t, e.manager.Plugins())
}

func TestANewerAllocationTakesOver(t *testing.T) {
	e := newManagerEnv(t)
	first, second := filepath.Join(e.dir, "a1.sock"), filepath.Join(e.dir, "a2.sock")
	dockervolumetest.ServeAt(t, first, volume.NewHandler(dockervolumetest.NewMemDriver(dockervolume.ScopeLocal)))
	dockervolumetest.ServeAt(t, second, volume.NewHandler(dockervolumetest.NewMemDriver(dockervolume.ScopeGlobal)))

	e.register(t, "vol", "a1", first)
	old := e.expect(t, wait, "vol", "a1", healthy)
	watcher := probe.New(t, e.system)
	watcher.Watch(t, old.GetInstance())

	e.register(t, "vol", "a2", second)
	// The old instance's last report and the new one's first come from two
	// actors, in either order.
	reports := e.health.ExpectAll(t, wait, e.about("vol", "a1", final), e.about("vol", "a2", healthy))
	watcher.ExpectTerminated(t, old.GetInstance(), wait)
	now := reports[1].(*messages.DockerVolumePluginHealth)
	require.NotEqual(t, old.GetInstance().GetId(), now.GetInstance().GetId())
	require.Equal(t, dockervolume.ScopeGlobal, now.GetScope())
	require.Eventually(t, func() bool {
		list := e.manager.Plugins()
		return len(list) == 1 && list[0].GetAllocId() == "a2"
	}, wait, 10*time.Millisecond)

	// The newer one leaving hands the plugin back to the older one.
	require.NoError(t, e.registry.DeregisterPlugin(dockervolume.PluginType, "vol", "a2"))
	e.expect(t, wait, "vol", "a1", healthy)
}

func TestHealthComesFromCapabilitiesOrElseList(t *testing.T) {
	tests := []struct {
		name        string
		plugin      httpServer
		healthy     bool
		scope       string
		description string
	}{
		{
			name:        "a plugin whose Capabilities answers is healthy, with its scope",
			plugin:      fakeVolumePlugin(http.StatusOK, `{"Capabilities": {"Scope": "global"}}`, http.StatusInternalServerError, `{"Err": "no list"}`),
			healthy:     true,
			scope:       dockervolume.ScopeGlobal,
			description: "VolumeDriver.Capabilities answered",
		},
		{
			name:        "a plugin whose Capabilities fails but List answers is healthy",
			plugin:      fakeVolumePlugin(http.StatusInternalServerError, `{"Err": "capabilities are broken"}`, http.StatusOK, `{"Volumes": []}`),
			healthy:     true,
			description: "VolumeDriver.List answered (VolumeDriver.Capabilities failed: get capabilities: plugin returned an error",
		},
		{
			name:        "a plugin whose Capabilities and List fail is unhealthy",
			plugin:      fakeVolumePlugin(http.StatusInternalServerError, `{"Err": "capabilities are broken"}`, http.StatusOK, `not JSON`),
			description: "VolumeDriver.Capabilities and VolumeDriver.List failed",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newManagerEnv(t)
			socket := filepath.Join(e.dir, "fake.sock")
			dockervolumetest.ServeAt(t, socket, tt.plugin)
			e.register(t, "fake", "a1", socket)
			h := e.expect(t, wait, "fake", "a1", func(*messages.DockerVolumePluginHealth) bool { return true })
			require.Equal(t, tt.healthy, h.GetHealthy(), h.GetDescription())
			require.Equal(t, tt.scope, h.GetScope())
			require.True(t, strings.HasPrefix(h.GetDescription(), tt.description), h.GetDescription())
		})
	}
}

func TestHealthGoesBadWhenThePluginStopsAndBackWhenItReturns(t *testing.T) {
	e := newManagerEnv(t)
	socket := filepath.Join(e.dir, "vol.sock")
	stop := dockervolumetest.ServeAt(t, socket, volume.NewHandler(dockervolumetest.NewMemDriver(dockervolume.ScopeLocal)))
	e.register(t, "vol", "a1", socket)
	e.expect(t, wait, "vol", "a1", healthy)

	stop()
	bad := e.expect(t, wait, "vol", "a1", unhealthy)
	require.False(t, bad.GetFinal(), "the instance goes on checking")
	require.Contains(t, bad.GetDescription(), "VolumeDriver.Capabilities and VolumeDriver.List failed")
	require.False(t, e.manager.Plugins()[0].GetHealthy())

	dockervolumetest.ServeAt(t, socket, volume.NewHandler(dockervolumetest.NewMemDriver(dockervolume.ScopeLocal)))
	e.expect(t, wait, "vol", "a1", healthy)
}

func TestAnUnreachablePluginIsReportedUnhealthyOnlyOnce(t *testing.T) {
	e := newManagerEnv(t)
	require.NoError(t, e.registry.RegisterPlugin(&messages.PluginInfo{Type: dockervolume.PluginType, Name: "far",
		AllocId: "a1", Connection: &messages.ConnectionInfo{Address: "tcp://127.0.0.1:1"}}))
	h := e.expect(t, wait, "far", "a1", func(*messages.DockerVolumePluginHealth) bool { return true })
	require.False(t, h.GetHealthy())
	require.Contains(t, h.GetDescription(), "VolumeDriver.Capabilities and VolumeDriver.List failed")
	e.health.ExpectNone(t, 200*time.Millisecond)
}

func TestStartManagerRefusesABadConfig(t *testing.T) {
	system := probe.NewSystem(t)
	_, err := dockervolume.Start(system, dockervolume.Config{HealthTimeout: -time.Second})
	require.ErrorIs(t, err, dockervolume.ErrInvalidConfig)
	require.ErrorContains(t, err, "Registry is required")
	require.ErrorContains(t, err, "HealthTimeout is -1s, must not be negative")
	_, err = dockervolume.Start(system, dockervolume.Config{Registry: &registry.Registry{},
		Supervision: supervisor.Spec{OnGiveUp: supervisor.Escalate}})
	require.ErrorContains(t, err, "Supervision.OnGiveUp is escalate, must be stop")
}

// A plugin that comes back is seen healthy within seconds, though the
// health interval is a minute: unhealthy plugins are checked again after
// a backoff from one second.
func TestAnUnhealthyTCPPluginIsRecheckedWithinSecondsNotAtTheNextPoll(t *testing.T) {
	system := probe.NewSystem(t)
	bucket, err := storage.NewMemory().Bucket(registry.BucketName)
	require.NoError(t, err)
	reg, err := registry.New(system, registry.Config{Bucket: bucket, Logger: probe.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, reg.Shutdown()) })
	m, err := dockervolume.Start(system, dockervolume.Config{
		Registry: reg, Logger: probe.Logger(t), HealthInterval: time.Minute, HealthTimeout: time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Shutdown()) })
	health := probe.New(t, system)
	health.Send(m.PID(), &messages.SubscribeDockerVolume{Subscriber: health.PID(), Replay: true})

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nobody listens yet
	require.NoError(t, reg.RegisterPlugin(&messages.PluginInfo{Type: dockervolume.PluginType, Name: "tcpvol",
		AllocId: "a1", Connection: &messages.ConnectionInfo{Address: "tcp://" + addr}}))
	probe.FishFor(t, health, wait, func(h *messages.DockerVolumePluginHealth) bool { return !h.GetHealthy() })

	l, err = net.Listen("tcp", addr)
	require.NoError(t, err)
	h := volume.NewHandler(dockervolumetest.NewMemDriver(dockervolume.ScopeLocal))
	served := make(chan struct{})
	go func() { defer close(served); _ = h.Serve(l) }()
	t.Cleanup(func() { _ = l.Close(); <-served })
	probe.FishFor(t, health, 10*time.Second, func(h *messages.DockerVolumePluginHealth) bool { return h.GetHealthy() })
}
