package discovery

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/sdk"
	"github.com/docker/go-plugins-helpers/volume"
	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	actorprobe "github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
	"github.com/plugvisor/plugvisor/supervisor"
)

// wait is how long a test waits for what must happen: long enough for a
// loaded machine, and a wait ends as soon as what it waits for happens.
const wait = 30 * time.Second

// env is one test's registry and discovery, watching run/ (sockets) and
// etc/ (spec files) under root.
type env struct {
	root     string
	sockets  string
	specs    string
	registry *registry.Registry
	d        *Discovery
	events   *actorprobe.Probe // subscribed to the discovery actor
	logs     *actorprobe.LogBuffer
}

// testConfig is quick: rescans every 100ms, short handshakes and lookups,
// and fast retries from 20ms, doubling up to 1s, for about 3s in all. A
// plugin started while discovery watches is often seen between bind and
// listen (refused), and on a busy machine that moment can outlast a retry or
// two: the fast backoff rides it out within what a test waits, as the
// default one does, before the slow retry (a minute) takes over.
func testConfig() Config {
	return Config{
		RescanInterval:  100 * time.Millisecond,
		ActivateTimeout: 300 * time.Millisecond,
		CSITimeout:      time.Second,
		Retry:           supervisor.Spec{MaxRestarts: 8, Within: time.Minute, InitialDelay: 20 * time.Millisecond, MaxDelay: time.Second},
		LookupBackoff:   []time.Duration{20 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond},
	}
}

// oneFastRetry is a fast backoff of one retry, after 20ms: a plugin's second
// failure leaves it to the slow retry. A test that uses it starts its
// plugins where no scan sees them before they listen, or makes the slow
// retry short.
func oneFastRetry() supervisor.Spec {
	return supervisor.Spec{MaxRestarts: 1, Within: time.Minute, InitialDelay: 20 * time.Millisecond, MaxDelay: 20 * time.Millisecond}
}

// newEnv starts a registry and a discovery configured by testConfig and
// then tweak, on directories that exist and are empty.
func newEnv(t *testing.T, tweak func(*Config)) *env {
	t.Helper()
	system := actorprobe.NewSystem(t)
	e := &env{root: tempDir(t), logs: &actorprobe.LogBuffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("discovery log:\n%s", e.logs)
		}
	})
	e.sockets, e.specs = filepath.Join(e.root, "run"), filepath.Join(e.root, "etc")
	require.NoError(t, os.Mkdir(e.sockets, 0o755))
	require.NoError(t, os.Mkdir(e.specs, 0o755))
	bucket, err := storage.NewMemory().Bucket(registry.BucketName)
	require.NoError(t, err)
	e.registry, err = registry.New(system, registry.Config{Bucket: bucket, Logger: actorprobe.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.registry.Shutdown()) })

	cfg := testConfig()
	cfg.Dirs = Dirs{Sockets: []string{e.sockets}, Specs: []string{e.specs}}
	cfg.Registry = e.registry
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: e.logs, Level: hclog.Info})
	if tweak != nil {
		tweak(&cfg)
	}
	e.d, err = Start(system, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.d.Shutdown()) })
	e.events = actorprobe.New(t, system)
	e.events.Send(e.d.PID(), &messages.SubscribeDiscovery{Subscriber: e.events.PID(), Replay: true})
	return e
}

// await waits for plugin name to reach state, and returns what discovery says of it.
func (e *env) await(t *testing.T, name string, state messages.DiscoveredPluginState) *messages.DiscoveredPlugin {
	t.Helper()
	return actorprobe.FishFor(t, e.events, wait, func(m *messages.DiscoveredPluginChanged) bool {
		return m.GetPlugin().GetName() == name && m.GetPlugin().GetState() == state
	}).GetPlugin()
}

// registered waits for plugin (ptype, name) to be registered.
func (e *env) registered(t *testing.T, ptype, name string) *messages.PluginInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	p, err := e.registry.WaitForPlugin(ctx, ptype, name)
	require.NoError(t, err)
	return p
}

// deregistered waits until no plugin of ptype is called name.
func (e *env) deregistered(t *testing.T, ptype, name string) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, ok := e.registry.Snapshot().Current(ptype, name)
		return !ok
	}, wait, 10*time.Millisecond, "plugin %s %q is still registered", ptype, name)
}

// volumePlugin serves a go-plugins-helpers volume plugin at path until the
// test ends, or until stop closes its listener (which removes the socket).
func volumePlugin(t *testing.T, path string) (stop func()) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	l, err := net.Listen("unix", path)
	require.NoError(t, err)
	serveOn(t, l, volume.NewHandler(activationOnly{}))
	return func() { l.Close() }
}

// httpPlugin serves h on a unix socket at path until the test ends.
func httpPlugin(t *testing.T, path string, h http.HandlerFunc) {
	t.Helper()
	l, err := net.Listen("unix", path)
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
}

// hangUp listens on a unix socket at path and closes every connection at
// once, until the test ends.
func hangUp(t *testing.T, path string) {
	t.Helper()
	l, err := net.Listen("unix", path)
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
	})
}

func TestPluginsAreRegisteredWhenTheyAppearAndDeregisteredWhenTheyGo(t *testing.T) {
	tests := []struct {
		name   string
		plugin string // the discovery name
		ptypes []string
		// start serves the plugin and writes its file; it returns what
		// makes the plugin's file go away.
		start func(t *testing.T, e *env) (remove func())
	}{
		{
			name: "a volume plugin's socket", plugin: "vol", ptypes: []string{TypeDockerVolume},
			start: func(t *testing.T, e *env) func() { return volumePlugin(t, filepath.Join(e.sockets, "vol.sock")) },
		},
		{
			name: "a socket in a directory of its own", plugin: "nested", ptypes: []string{TypeDockerVolume},
			start: func(t *testing.T, e *env) func() {
				return volumePlugin(t, filepath.Join(e.sockets, "nested", "nested.sock"))
			},
		},
		{
			name: "a .spec file naming a unix socket elsewhere", plugin: "viaspec", ptypes: []string{TypeDockerVolume},
			start: func(t *testing.T, e *env) func() {
				volumePlugin(t, filepath.Join(e.root, "elsewhere.sock"))
				spec := filepath.Join(e.specs, "viaspec.spec")
				writeFile(t, spec, "unix://"+filepath.Join(e.root, "elsewhere.sock"))
				return func() { require.NoError(t, os.Remove(spec)) }
			},
		},
		{
			name: "a .json file naming a TCP address, with two interfaces", plugin: "net", ptypes: []string{TypeDockerNetwork, TypeDockerIPAM},
			start: func(t *testing.T, e *env) func() {
				l, err := net.Listen("tcp", "127.0.0.1:0")
				require.NoError(t, err)
				serveOn(t, l, sdk.NewHandler(manifestJSON("NetworkDriver", "IpamDriver")))
				spec := filepath.Join(e.specs, "net.json")
				writeFile(t, spec, fmt.Sprintf(`{"Name": "net", "Addr": "tcp://%s"}`, l.Addr()))
				return func() { require.NoError(t, os.Remove(spec)) }
			},
		},
		{
			name: "a .json file naming an https address, with its TLS settings", plugin: "secure", ptypes: []string{TypeDockerAuthz},
			start: func(t *testing.T, e *env) func() {
				pki := newTestPKI(t)
				l, err := net.Listen("tcp", "127.0.0.1:0")
				require.NoError(t, err)
				serveOn(t, tls.NewListener(l, pki.serverConfig), sdk.NewHandler(manifestJSON("authz")))
				spec := filepath.Join(e.specs, "secure.json")
				writeFile(t, spec, fmt.Sprintf(`{"Addr": "https://%s", "TLSConfig": {"CAFile": %q, "CertFile": %q, "KeyFile": %q}}`,
					l.Addr(), pki.ca, pki.cert, pki.key))
				return func() { require.NoError(t, os.Remove(spec)) }
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// No rescans: fsnotify alone must notice the plugin come and go.
			e := newEnv(t, func(c *Config) { c.RescanInterval = time.Hour })
			remove := tt.start(t, e)
			status := e.await(t, tt.plugin, messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_REGISTERED)
			require.Equal(t, ProtocolDocker, status.GetProtocol())
			for _, ptype := range tt.ptypes {
				p := e.registered(t, ptype, tt.plugin)
				require.Equal(t, status.GetSource(), p.GetOptions()[OptionSource])
				require.Equal(t, AllocID(status.GetSource()), p.GetAllocId())
				if settings := p.GetConnection().GetTls(); settings != nil {
					require.NotEmpty(t, settings.GetCaFile(), "the TLS settings are registered with the address")
				}
			}

			remove()
			e.await(t, tt.plugin, messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_GONE)
			for _, ptype := range tt.ptypes {
				e.deregistered(t, ptype, tt.plugin)
			}
		})
	}
}

func TestCSIPluginsAreRegisteredFromTheirIdentity(t *testing.T) {
	tests := []struct {
		name   string
		mode   hostpath.Mode
		ptypes []string
	}{
		{"a controller and node plugin is registered as both", hostpath.ModeMonolith, []string{csi.TypeController, csi.TypeNode}},
		{"a controller plugin is registered as a controller only", hostpath.ModeController, []string{csi.TypeController}},
		{"a node plugin is registered as a node only", hostpath.ModeNode, []string{csi.TypeNode}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := hostpathtest.Serve(t, hostpath.Config{Name: "hostpath.csi.test", Version: "1.2.3", NodeID: "node-1",
				Root: hostpathtest.TempDir(t), Mode: tt.mode})
			e := newEnv(t, func(c *Config) { c.Dirs.Sockets = []string{filepath.Dir(srv.Endpoint)} })

			status := e.await(t, "csi", messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_REGISTERED)
			require.Equal(t, ProtocolCSI, status.GetProtocol())
			var got []string
			for _, p := range status.GetRegistered() {
				got = append(got, p.GetType())
			}
			require.ElementsMatch(t, tt.ptypes, got)
			for _, ptype := range tt.ptypes {
				p := e.registered(t, ptype, "hostpath.csi.test")
				require.Equal(t, "1.2.3", p.GetVersion())
				require.Equal(t, srv.Endpoint, p.GetConnection().GetSocketPath())
				require.Equal(t, AllocID(srv.Endpoint), p.GetAllocId())
				require.True(t, strings.HasPrefix(p.GetAllocId(), "disc-"))
			}
		})
	}
}

func TestBadPluginsAreReportedAloneAndNothingElseIsDisturbed(t *testing.T) {
	// Past its one fast retry, a plugin that keeps failing is logged; the
	// short slow retry tries again a socket seen between bind and listen.
	e := newEnv(t, func(c *Config) { c.Retry, c.SlowRetry = oneFastRetry(), 200*time.Millisecond })
	files := map[string]func(path string){
		"garbage.spec": func(p string) { writeFile(t, p, "this is not a URL") },
		"ftp.spec":     func(p string) { writeFile(t, p, "ftp://plugins.example.com/x") },
		"nohost.spec":  func(p string) { writeFile(t, p, "tcp://:8080") },
		"types.json":   func(p string) { writeFile(t, p, `{"Name": 7, "Addr": ["tcp://h:1"]}`) },
		strings.Repeat("n", MaxNameLen+1) + ".spec": func(p string) { writeFile(t, p, "tcp://127.0.0.1:1") },
	}
	for name, write := range files {
		write(filepath.Join(e.specs, name))
	}
	writeFile(t, filepath.Join(e.sockets, "regular.sock"), "not a socket")
	require.NoError(t, os.Symlink("loop.sock", filepath.Join(e.sockets, "loop.sock")))
	silent := make(chan struct{})
	httpPlugin(t, filepath.Join(e.sockets, "silent.sock"), func(http.ResponseWriter, *http.Request) { <-silent })
	t.Cleanup(func() { close(silent) }) // before the silent server closes
	httpPlugin(t, filepath.Join(e.sockets, "badjson.sock"), reply(http.StatusOK, MediaTypeV11, `{"Implements": [`))
	httpPlugin(t, filepath.Join(e.sockets, "html.sock"), reply(http.StatusOK, "text/html", manifestJSON("VolumeDriver")))
	httpPlugin(t, filepath.Join(e.sockets, "fails.sock"), reply(http.StatusInternalServerError, MediaTypeV11, `{"Err": "out of cheese"}`))
	httpPlugin(t, filepath.Join(e.sockets, "missing.sock"), reply(http.StatusNotFound, "text/plain", "404 page not found"))
	httpPlugin(t, filepath.Join(e.sockets, "nothing.sock"), reply(http.StatusOK, MediaTypeV11, `{"Implements": []}`))
	hangUp(t, filepath.Join(e.sockets, "mute.sock"))
	volumePlugin(t, filepath.Join(e.sockets, "good.sock"))

	tests := []struct {
		name    string
		plugin  string
		state   messages.DiscoveredPluginState
		wantErr error
	}{
		{"a garbage spec file", "garbage", messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_INVALID, ErrBadSpec},
		{"a spec file with a bad URL scheme", "ftp", messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_INVALID, ErrBadScheme},
		{"a tcp URL without a host", "nohost", messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_INVALID, ErrBadAddress},
		{"a JSON spec with wrong types", "types", messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_INVALID, ErrBadSpec},
		{"a name over the length limit", strings.Repeat("n", MaxNameLen+1), messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_INVALID, ErrInvalidName},
		{"a socket path that is a regular file", "regular", messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_INVALID, ErrNotSocket},
		{"a symlink loop", "loop", messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_INVALID, ErrUnreadable},
		{"a plugin that never answers activation", "silent", messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_ACTIVATING, ErrTimeout},
		{"an activation answered with invalid JSON", "badjson", messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_ACTIVATING, ErrBadResponse},
		{"an activation answered with the wrong content type", "html", messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_ACTIVATING, ErrBadResponse},
		{"an activation answered with HTTP 500", "fails", messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_ACTIVATING, ErrPluginFailed},
		{"an activation answered with HTTP 404", "missing", messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_ACTIVATING, ErrNotAPlugin},
		{"a manifest that implements nothing", "nothing", messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_FAILED, ErrUnusable},
		{"a socket that speaks neither protocol", "mute", messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_ACTIVATING, ErrUnknownProtocol},
	}
	e.registered(t, TypeDockerVolume, "good")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var status *messages.DiscoveredPlugin
			// A plugin's first attempts may fail otherwise (refused, seen
			// between bind and listen): wait for the failure it is here for.
			require.Eventually(t, func() bool {
				for _, p := range e.d.Plugins() {
					if p.GetName() == tt.plugin && p.GetState() == tt.state && strings.Contains(p.GetError(), tt.wantErr.Error()) &&
						(tt.state != messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_ACTIVATING || p.GetFailures() >= 2) {
						status = p
						return true
					}
				}
				return false
			}, wait, 10*time.Millisecond, "plugin %q never reached %v with %v; discovery has %v", tt.plugin, tt.state, tt.wantErr, e.d.Plugins())
			require.Contains(t, status.GetError(), fmt.Sprintf("%q", tt.plugin), "the error names the plugin")
			if tt.state == messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_ACTIVATING {
				require.NotNil(t, status.GetNextAttemptTime(), "past the fast backoff, a next attempt is due: nothing is given up for good")
			}
			require.Empty(t, status.GetRegistered())
			require.Contains(t, e.logs.String(), tt.plugin, "the log names the plugin")
			require.Contains(t, e.logs.String(), filepath.Base(status.GetSource()), "the log names the file")
		})
	}

	t.Run("nothing else is disturbed", func(t *testing.T) {
		s := e.registry.Snapshot()
		require.Len(t, s.List(""), 1, "only the good plugin is registered: %v", s.List(""))
		p, err := e.d.Get(context.Background(), "good", "VolumeDriver")
		require.NoError(t, err)
		require.Equal(t, filepath.Join(e.sockets, "good.sock"), p.GetConnection().GetSocketPath())

		volumePlugin(t, filepath.Join(e.sockets, "later.sock"))
		e.registered(t, TypeDockerVolume, "later")
	})
}

func TestSocketsThatFlickerLeaveNoRegistrationBehind(t *testing.T) {
	e := newEnv(t, nil)
	volumePlugin(t, filepath.Join(e.sockets, "steady.sock"))
	for i := range 20 {
		stop := volumePlugin(t, filepath.Join(e.sockets, fmt.Sprintf("flicker%d.sock", i%3)))
		time.Sleep(time.Duration(i%4) * time.Millisecond)
		stop()
	}
	e.registered(t, TypeDockerVolume, "steady")
	require.Eventually(t, func() bool {
		list := e.registry.Snapshot().List("")
		return len(list) == 1 && len(e.d.Plugins()) == 1
	}, wait, 10*time.Millisecond, "registry: %v; discovery: %v", e.registry.Snapshot().List(""), e.d.Plugins())
}

func TestADirectoryDeletedAndRecreatedWhileWatchedKeepsWorking(t *testing.T) {
	e := newEnv(t, nil)
	stop := volumePlugin(t, filepath.Join(e.sockets, "first.sock"))
	e.registered(t, TypeDockerVolume, "first")

	stop()
	require.NoError(t, os.RemoveAll(e.sockets))
	e.await(t, "first", messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_GONE)
	e.deregistered(t, TypeDockerVolume, "first")

	require.NoError(t, os.Mkdir(e.sockets, 0o755))
	volumePlugin(t, filepath.Join(e.sockets, "second.sock"))
	e.registered(t, TypeDockerVolume, "second")
	// And it goes on working for plugins added later.
	volumePlugin(t, filepath.Join(e.sockets, "third.sock"))
	e.registered(t, TypeDockerVolume, "third")
}

func TestAReplacedPluginFileIsActivatedAgainAndItsRegistrationsFollow(t *testing.T) {
	e := newEnv(t, nil)
	path := filepath.Join(e.sockets, "shifty.sock")
	stop := volumePlugin(t, path)
	e.registered(t, TypeDockerVolume, "shifty")

	stop()
	l, err := net.Listen("unix", path)
	require.NoError(t, err)
	serveOn(t, l, sdk.NewHandler(manifestJSON("NetworkDriver")))
	e.registered(t, TypeDockerNetwork, "shifty")
	e.deregistered(t, TypeDockerVolume, "shifty")
}

func TestRegistrationsLeftFromAnEarlierRunAreRemoved(t *testing.T) {
	system := actorprobe.NewSystem(t)
	bucket, err := storage.NewMemory().Bucket(registry.BucketName)
	require.NoError(t, err)
	reg, err := registry.New(system, registry.Config{Bucket: bucket})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, reg.Shutdown()) })
	dir := tempDir(t)
	stale := filepath.Join(dir, "stale.sock")
	require.NoError(t, reg.RegisterPlugin(&messages.PluginInfo{Type: TypeDockerVolume, Name: "stale", AllocId: AllocID(stale),
		Connection: &messages.ConnectionInfo{SocketPath: stale}, Options: map[string]string{OptionSource: stale}}))
	require.NoError(t, reg.RegisterPlugin(&messages.PluginInfo{Type: TypeDockerVolume, Name: "by-hand", AllocId: "a1",
		Connection: &messages.ConnectionInfo{SocketPath: filepath.Join(dir, "by-hand.sock")}}))

	cfg := testConfig()
	cfg.Dirs, cfg.Registry = Dirs{Sockets: []string{dir}}, reg
	d, err := Start(system, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Shutdown()) })
	require.Eventually(t, func() bool {
		_, ok := reg.Snapshot().Current(TypeDockerVolume, "stale")
		return !ok
	}, wait, 10*time.Millisecond)
	_, ok := reg.Snapshot().Current(TypeDockerVolume, "by-hand")
	require.True(t, ok, "a registration discovery did not make is left alone")
}

func TestHandleRunsForPluginsActivatedBeforeAndAfterIt(t *testing.T) {
	e := newEnv(t, nil)
	volumePlugin(t, filepath.Join(e.sockets, "before.sock"))
	e.registered(t, TypeDockerVolume, "before")

	volumes, networks := make(chan string, 10), make(chan string, 10)
	require.NoError(t, e.d.Handle("VolumeDriver", func(name string, _ *messages.PluginInfo) { volumes <- name }))
	require.NoError(t, e.d.Handle("NetworkDriver", func(name string, _ *messages.PluginInfo) { networks <- name }))
	require.NoError(t, e.d.Handle(TypeDockerVolume, func(string, *messages.PluginInfo) { panic("a handler that panics") }))
	receive := func(ch chan string) string {
		select {
		case name := <-ch:
			return name
		case <-time.After(wait):
			t.Fatal("the handler did not run")
			return ""
		}
	}
	require.Equal(t, "before", receive(volumes))

	volumePlugin(t, filepath.Join(e.sockets, "after.sock"))
	require.Equal(t, "after", receive(volumes))
	select {
	case name := <-networks:
		t.Fatalf("the NetworkDriver handler ran for %q", name)
	case extra := <-volumes:
		t.Fatalf("the VolumeDriver handler ran again, for %q", extra)
	case <-time.After(100 * time.Millisecond):
	}
	require.ErrorContains(t, e.d.Handle("", func(string, *messages.PluginInfo) {}), "must not be empty")
}

func TestGetAndGetAll(t *testing.T) {
	e := newEnv(t, nil)
	volumePlugin(t, filepath.Join(e.sockets, "vol1.sock"))
	volumePlugin(t, filepath.Join(e.sockets, "vol2.sock"))
	e.registered(t, TypeDockerVolume, "vol1")
	e.registered(t, TypeDockerVolume, "vol2")
	ctx := context.Background()

	t.Run("a registered plugin is found by interface or by type", func(t *testing.T) {
		for _, implements := range []string{"VolumeDriver", TypeDockerVolume} {
			p, err := e.d.Get(ctx, "vol1", implements)
			require.NoError(t, err)
			require.Equal(t, "vol1", p.GetName())
		}
	})
	t.Run("a plugin that implements something else does not implement it", func(t *testing.T) {
		// A lookup again would wait a minute first: the answer comes at
		// once or the test takes a minute.
		e := newEnv(t, func(c *Config) { c.LookupBackoff = []time.Duration{time.Minute} })
		volumePlugin(t, filepath.Join(e.sockets, "vol1.sock"))
		e.registered(t, TypeDockerVolume, "vol1")
		start := time.Now()
		_, err := e.d.Get(ctx, "vol1", "NetworkDriver")
		require.ErrorIs(t, err, ErrDoesNotImplement)
		require.EqualError(t, err, `does not implement: plugin "vol1" does not implement NetworkDriver (docker-network); it is registered as docker-volume`)
		require.Less(t, time.Since(start), 30*time.Second, "no lookup again: the answer will not change")
	})
	t.Run("a plugin nowhere is looked up again before it is not found", func(t *testing.T) {
		start := time.Now()
		_, err := e.d.Get(ctx, "nowhere", "VolumeDriver")
		require.ErrorIs(t, err, ErrNotFound)
		require.ErrorContains(t, err, `plugin "nowhere": not registered after 4 lookups`)
		require.GreaterOrEqual(t, time.Since(start), 140*time.Millisecond, "20+40+80ms of backoff")
	})
	t.Run("a plugin that appears during the lookups is found", func(t *testing.T) {
		e := newEnv(t, func(c *Config) { c.LookupBackoff = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} })
		go func() {
			time.Sleep(50 * time.Millisecond)
			volumePlugin(t, filepath.Join(e.sockets, "late.sock"))
		}()
		p, err := e.d.Get(ctx, "late", "VolumeDriver")
		require.NoError(t, err)
		require.Equal(t, "late", p.GetName())
	})
	t.Run("GetAll lists every plugin of an interface", func(t *testing.T) {
		all, err := e.d.GetAll("VolumeDriver")
		require.NoError(t, err)
		require.Len(t, all, 2)
		require.Equal(t, []string{"vol1", "vol2"}, []string{all[0].GetName(), all[1].GetName()})
		none, err := e.d.GetAll("IpamDriver")
		require.NoError(t, err)
		require.Empty(t, none)
	})
}

func TestStartRefusesABadConfig(t *testing.T) {
	system := actorprobe.NewSystem(t)
	tests := []struct {
		name  string
		tweak func(*Config)
		want  string
	}{
		{"no registry", func(c *Config) { c.Registry = nil }, "a registry is required"},
		{"no directory", func(c *Config) { c.Dirs = Dirs{} }, "at least one directory"},
		{"a relative directory", func(c *Config) { c.Dirs.Specs = []string{"etc/plugins"} }, "not an absolute path"},
		{"a negative duration", func(c *Config) { c.RescanInterval = -time.Second }, "must not be negative"},
		{"a retry policy that never gives up", func(c *Config) { c.Retry.Within = time.Millisecond }, "Within"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Dirs, cfg.Registry = Dirs{Sockets: []string{"/nonexistent"}}, &registry.Registry{}
			tt.tweak(&cfg)
			_, err := Start(system, cfg)
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.ErrorContains(t, err, tt.want)
		})
	}
}
