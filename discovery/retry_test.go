package discovery

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/volume"
	"github.com/stretchr/testify/require"

	actorprobe "github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/supervisor/supervisortest"
)

// awaitFailures waits for plugin name to be activating with at least n
// failed attempts and a next attempt due.
func (e *env) awaitFailures(t *testing.T, name string, n uint32) *messages.DiscoveredPlugin {
	t.Helper()
	return actorprobe.FishFor(t, e.events, wait, func(m *messages.DiscoveredPluginChanged) bool {
		p := m.GetPlugin()
		return p.GetName() == name && p.GetState() == messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_ACTIVATING &&
			p.GetFailures() >= n && p.GetNextAttemptTime() != nil
	}).GetPlugin()
}

// A plugin whose spec file is there but which starts after the fast
// backoff gave up is still found, at the slow retry.
func TestAPluginThatStartsAfterTheFastRetriesIsFoundAtTheSlowRetry(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := supervisortest.NewFakeClock(start)
	e := newEnv(t, func(c *Config) { c.Clock, c.Retry, c.SlowRetry = clock, oneFastRetry(), time.Minute })
	socket := filepath.Join(e.root, "late.sock")
	writeFile(t, filepath.Join(e.specs, "late.spec"), "unix://"+socket)

	e.awaitFailures(t, "late", 1)
	clock.Advance(20 * time.Millisecond) // the one fast retry
	p := e.awaitFailures(t, "late", 2)
	require.Equal(t, start.Add(20*time.Millisecond).Add(time.Minute), p.GetNextAttemptTime().AsTime(),
		"past the fast backoff, the next attempt is a slow retry away")

	volumePlugin(t, socket)
	clock.Advance(time.Minute - time.Nanosecond)
	e.events.ExpectNone(t, 200*time.Millisecond) // not due yet
	clock.Advance(time.Nanosecond)
	e.await(t, "late", messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_REGISTERED)
	e.registered(t, TypeDockerVolume, "late")
}

// A plugin whose socket discovery finds bound but not listening yet (the
// moment between bind and listen as a plugin starts) is refused: a
// transient failure, tried again at the retry, and found then.
func TestASocketFoundBeforeItListensIsFoundAtTheRetry(t *testing.T) {
	clock := supervisortest.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	e := newEnv(t, func(c *Config) { c.Clock, c.ActivateTimeout = clock, wait })
	listen := bindSocket(t, filepath.Join(e.sockets, "early.sock"))
	p := e.awaitFailures(t, "early", 1)
	require.Contains(t, p.GetError(), "connection refused")

	serveOn(t, listen(), volume.NewHandler(activationOnly{}))
	clock.Advance(20 * time.Millisecond) // the fast retry (testConfig)
	e.await(t, "early", messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_REGISTERED)
	e.registered(t, TypeDockerVolume, "early")
}

// bindSocket binds a unix socket at path without listening on it, as
// net.Listen does for a moment: connections to it are refused. listen
// makes it listen, and returns its listener.
func bindSocket(t *testing.T, path string) (listen func() net.Listener) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	f := os.NewFile(uintptr(fd), path)
	t.Cleanup(func() { f.Close() })
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}))
	return func() net.Listener {
		require.NoError(t, syscall.Listen(fd, syscall.SOMAXCONN))
		l, err := net.FileListener(f)
		require.NoError(t, err)
		return l
	}
}

// A failure that trying again cannot change is not retried: no timer is
// left, and the plugin waits for its file to change.
func TestAPermanentFailureWaitsForTheFileToChange(t *testing.T) {
	clock := supervisortest.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	e := newEnv(t, func(c *Config) {
		c.Clock, c.ActivateTimeout = clock, wait // a slow answer on a busy machine is no timeout
		// The plugin listens before discovery starts. Started after, its
		// socket can be seen between bind and listen: refused, a transient
		// failure retried on the fake clock, which this test does not move.
		httpPlugin(t, filepath.Join(c.Dirs.Sockets[0], "nothing.sock"), reply(http.StatusOK, MediaTypeV11, `{"Implements": []}`))
	})
	p := e.await(t, "nothing", messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_FAILED)
	require.EqualValues(t, 1, p.GetFailures())
	require.Nil(t, p.GetNextAttemptTime())
	require.Zero(t, clock.Pending(), "no retry is scheduled")
}

// Get asks for a plugin waiting out a slow retry: it is tried at once
// (Docker's lazy activation), not an hour later.
func TestGetActivatesAFoundPluginAtOnce(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Retry, c.SlowRetry = oneFastRetry(), time.Hour })
	socket := filepath.Join(e.root, "lazy.sock")
	writeFile(t, filepath.Join(e.specs, "lazy.spec"), "unix://"+socket)
	e.awaitFailures(t, "lazy", 2)
	volumePlugin(t, socket)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	p, err := e.d.Get(ctx, "lazy", "VolumeDriver")
	require.NoError(t, err)
	require.Equal(t, AllocID(filepath.Join(e.specs, "lazy.spec")), p.GetAllocId())
	_, err = e.d.Get(ctx, "lazy", "NetworkDriver")
	require.ErrorIs(t, err, ErrDoesNotImplement)
	require.ErrorContains(t, err, "does not implement")
}

// A plugin whose activation hangs, and one that crashes on every
// connection, block nobody, and both are registered without help once
// they answer.
func TestAHangingAndACrashingPluginBlockNobodyAndRecoverAlone(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.SlowRetry = 100 * time.Millisecond })
	var answer atomic.Bool
	hang := make(chan struct{})
	t.Cleanup(func() {
		if !answer.Load() {
			close(hang)
		}
	})
	httpPlugin(t, filepath.Join(e.sockets, "hang.sock"), func(w http.ResponseWriter, r *http.Request) {
		if !answer.Load() {
			select {
			case <-hang:
			case <-r.Context().Done():
				return
			}
		}
		reply(http.StatusOK, MediaTypeV11, manifestJSON("VolumeDriver"))(w, r)
	})
	var crashes atomic.Int32
	httpPlugin(t, filepath.Join(e.sockets, "crash.sock"), func(w http.ResponseWriter, r *http.Request) {
		if crashes.Add(1) <= 3 {
			panic(http.ErrAbortHandler) // the connection drops without an answer
		}
		reply(http.StatusOK, MediaTypeV11, manifestJSON("VolumeDriver"))(w, r)
	})
	volumePlugin(t, filepath.Join(e.sockets, "good.sock"))
	e.registered(t, TypeDockerVolume, "good")

	e.awaitFailures(t, "hang", 1)
	answer.Store(true)
	close(hang)
	e.registered(t, TypeDockerVolume, "hang")
	e.registered(t, TypeDockerVolume, "crash")
	require.GreaterOrEqual(t, crashes.Load(), int32(4))
}

// A file named just ".spec" or ".sock" names no plugin: it is ignored, not
// reported as a directory that cannot be read.
func TestAFileWithOnlyAnExtensionIsIgnored(t *testing.T) {
	root := tempDir(t)
	tree{"etc/.spec": "unix:///x.sock", "etc/.json": "{}", "etc/ok.spec": "tcp://127.0.0.1:1"}.build(t, root)
	candidates, errs := Scan(Dirs{Specs: []string{filepath.Join(root, "etc")}})
	require.Empty(t, errs)
	require.Len(t, candidates, 1)
	require.Equal(t, "ok", candidates[0].Name)
}
