package dockervolume_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/docker/go-plugins-helpers/volume"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/discovery"
	"github.com/plugvisor/plugvisor/dockervolume"
	"github.com/plugvisor/plugvisor/dockervolume/dockervolumetest"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
)

// benchStack is a registry, discovery over one socket and one spec
// directory, and the docker-volume manager, as the agent wires them.
type benchStack struct {
	system   *actor.ActorSystem
	registry *registry.Registry
	disc     *discovery.Discovery
	manager  *dockervolume.Manager
	sockets  string
	specs    string
}

func newBenchStack(b *testing.B, healthInterval time.Duration) *benchStack {
	b.Helper()
	dir, err := os.MkdirTemp("", "pvb")
	require.NoError(b, err)
	b.Cleanup(func() { os.RemoveAll(dir) })
	s := &benchStack{system: actors.NewSystem(nil), sockets: filepath.Join(dir, "s"), specs: filepath.Join(dir, "e")}
	require.NoError(b, os.Mkdir(s.sockets, 0o755))
	require.NoError(b, os.Mkdir(s.specs, 0o755))
	bucket, err := storage.NewMemory().Bucket(registry.BucketName)
	require.NoError(b, err)
	s.registry, err = registry.New(s.system, registry.Config{Bucket: bucket})
	require.NoError(b, err)
	s.manager, err = dockervolume.Start(s.system, dockervolume.Config{Registry: s.registry, HealthInterval: healthInterval})
	require.NoError(b, err)
	s.disc, err = discovery.Start(s.system, discovery.Config{Dirs: discovery.Dirs{Sockets: []string{s.sockets}, Specs: []string{s.specs}},
		Registry: s.registry})
	require.NoError(b, err)
	b.Cleanup(func() {
		require.NoError(b, s.disc.Shutdown())
		require.NoError(b, s.manager.Shutdown())
		require.NoError(b, s.registry.Shutdown())
	})
	return s
}

// healthy reports how many volume plugins the manager lists healthy.
func (s *benchStack) healthy() int {
	n := 0
	for _, h := range s.manager.Plugins() {
		if h.GetHealthy() {
			n++
		}
	}
	return n
}

// waitHealthy polls until want plugins are registered and healthy.
func (s *benchStack) waitHealthy(b *testing.B, want int, within time.Duration) {
	b.Helper()
	deadline := time.Now().Add(within)
	for len(s.registry.Snapshot().List(dockervolume.PluginType)) < want || s.healthy() < want {
		if time.Now().After(deadline) {
			b.Fatalf("after %v: %d registered, %d healthy, want %d", within,
				len(s.registry.Snapshot().List(dockervolume.PluginType)), s.healthy(), want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// servePlugin serves an in-memory volume plugin on l until stop.
func servePlugin(l net.Listener) (stop func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = volume.NewHandler(dockervolumetest.NewMemDriver(dockervolume.ScopeLocal)).Serve(l)
	}()
	return func() { l.Close(); <-done }
}

// BenchmarkPluginsAppearingAtOnce: 200 plugin sockets appear in a watched
// directory at once; the time is until every one is registered and its
// instance reports healthy.
func BenchmarkPluginsAppearingAtOnce(b *testing.B) {
	const plugins = 200
	for range b.N {
		b.StopTimer()
		s := newBenchStack(b, time.Minute)
		b.StartTimer()
		for i := range plugins {
			l, err := net.Listen("unix", filepath.Join(s.sockets, fmt.Sprintf("p%03d.sock", i)))
			require.NoError(b, err)
			b.Cleanup(servePlugin(l))
		}
		s.waitHealthy(b, plugins, time.Minute)
	}
}

// BenchmarkRecovery: a plugin is killed and restarted 5 s later (past the
// 3 s grace for a unix socket; a TCP plugin's spec file stays). The time is
// from the restart until the plugin is healthy again, with the health
// interval at the agent's default of 30 s.
func BenchmarkRecovery(b *testing.B) {
	const down = 5 * time.Second
	listen := map[string]func(s *benchStack) (network, addr string){
		"unix": func(s *benchStack) (string, string) { return "unix", filepath.Join(s.sockets, "vol.sock") },
		"tcp": func(s *benchStack) (string, string) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(b, err)
			addr := l.Addr().String()
			l.Close()
			require.NoError(b, os.WriteFile(filepath.Join(s.specs, "vol.spec"), []byte("tcp://"+addr), 0o644))
			return "tcp", addr
		},
	}
	for _, kind := range []string{"unix", "tcp"} {
		b.Run(kind, func(b *testing.B) {
			var total time.Duration
			for range b.N {
				b.StopTimer()
				s := newBenchStack(b, 30*time.Second)
				network, addr := listen[kind](s)
				l, err := net.Listen(network, addr)
				require.NoError(b, err)
				stop := servePlugin(l)
				s.waitHealthy(b, 1, time.Minute)
				stop() // killed
				if kind == "tcp" {
					// A TCP plugin's death shows at its next check: have it seen.
					s.waitUnhealthy(b)
				}
				time.Sleep(down)
				l, err = net.Listen(network, addr)
				require.NoError(b, err)
				b.Cleanup(servePlugin(l))
				restarted := time.Now()
				b.StartTimer()
				s.waitHealthy(b, 1, time.Minute)
				total += time.Since(restarted)
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "s/recovery")
		})
	}
}

// waitUnhealthy waits until the one volume plugin is reported unhealthy:
// at its next check, up to the health interval away.
func (s *benchStack) waitUnhealthy(b *testing.B) {
	b.Helper()
	for s.healthy() > 0 {
		time.Sleep(10 * time.Millisecond)
	}
}
