package dockervolume_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/volume"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/plugvisor/plugvisor/discovery"
	"github.com/plugvisor/plugvisor/dockervolume"
	"github.com/plugvisor/plugvisor/dockervolume/dockervolumetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// pluginSocket returns a listener on a short socket path and a function
// giving the client of the plugin served there, found with discovery.
func pluginSocket(t *testing.T) (net.Listener, func() *dockervolume.Client) {
	t.Helper()
	dir, err := os.MkdirTemp("", "pvdv")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	l, err := net.Listen("unix", filepath.Join(dir, "mem.sock"))
	require.NoError(t, err)
	return l, func() *dockervolume.Client {
		c, err := discovery.Lookup(discovery.Dirs{Sockets: []string{dir}}, "mem")
		require.NoError(t, err)
		return dockervolume.NewClient(c)
	}
}

// startPlugin serves d with go-plugins-helpers until the test ends.
func startPlugin(t *testing.T, d volume.Driver) *dockervolume.Client {
	l, client := pluginSocket(t)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = volume.NewHandler(d).Serve(l)
	}()
	t.Cleanup(func() {
		l.Close() // every call closes its connection, so Serve leaves nothing behind
		<-stopped
	})
	return client()
}

// startFake serves h until the test ends.
func startFake(t *testing.T, h http.HandlerFunc) *dockervolume.Client {
	l, client := pluginSocket(t)
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return client()
}

// answer writes body as a Docker plugin answer.
func answer(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Type", discovery.MediaTypeV11)
	io.WriteString(w, body)
}

func TestRoundTripWithAGoPluginsHelpersPlugin(t *testing.T) {
	ctx := context.Background()
	c := startPlugin(t, dockervolumetest.NewMemDriver("global"))
	require.Equal(t, "mem", c.Plugin().Name)

	t.Run("capabilities give the scope", func(t *testing.T) {
		caps, err := c.Capabilities(ctx)
		require.NoError(t, err)
		require.Equal(t, dockervolume.Capabilities{Scope: dockervolume.ScopeGlobal}, caps)
	})
	t.Run("create makes a volume", func(t *testing.T) {
		require.NoError(t, c.Create(ctx, "v1", map[string]string{"size": "1G"}))
		require.NoError(t, c.Create(ctx, "v2", nil))
	})
	t.Run("creating it again gives the plugin's error text", func(t *testing.T) {
		err := c.Create(ctx, "v1", nil)
		require.ErrorIs(t, err, discovery.ErrPluginFailed)
		require.ErrorContains(t, err, `create volume "v1": `)
		require.ErrorContains(t, err, "volume v1 already exists (HTTP 500)")
	})
	t.Run("list gives both volumes", func(t *testing.T) {
		vols, err := c.List(ctx)
		require.NoError(t, err)
		require.Equal(t, []dockervolume.Volume{
			{Name: "v1", CreatedAt: "2026-01-02T03:04:05Z", Status: map[string]any{"size": "1G"}},
			{Name: "v2", CreatedAt: "2026-01-02T03:04:05Z"},
		}, vols)
	})
	t.Run("get gives one volume", func(t *testing.T) {
		v, err := c.Get(ctx, "v1")
		require.NoError(t, err)
		require.Equal(t, dockervolume.Volume{Name: "v1", CreatedAt: "2026-01-02T03:04:05Z", Status: map[string]any{"size": "1G"}}, v)
	})
	t.Run("path is empty before mounting", func(t *testing.T) {
		p, err := c.Path(ctx, "v1")
		require.NoError(t, err)
		require.Empty(t, p)
	})
	t.Run("mount gives the mount point", func(t *testing.T) {
		p, err := c.Mount(ctx, "v1", "container-1")
		require.NoError(t, err)
		require.Equal(t, "/mnt/mem/v1", p)
	})
	t.Run("path and get show the mount point", func(t *testing.T) {
		p, err := c.Path(ctx, "v1")
		require.NoError(t, err)
		require.Equal(t, "/mnt/mem/v1", p)
		v, err := c.Get(ctx, "v1")
		require.NoError(t, err)
		require.Equal(t, "/mnt/mem/v1", v.Mountpoint)
	})
	t.Run("removing a mounted volume gives the plugin's error text", func(t *testing.T) {
		err := c.Remove(ctx, "v1")
		require.ErrorIs(t, err, discovery.ErrPluginFailed)
		require.ErrorContains(t, err, "volume v1 is in use")
	})
	t.Run("unmounting for another caller fails", func(t *testing.T) {
		err := c.Unmount(ctx, "v1", "container-2")
		require.ErrorContains(t, err, "volume v1 is not mounted by container-2")
	})
	t.Run("unmount and remove", func(t *testing.T) {
		require.NoError(t, c.Unmount(ctx, "v1", "container-1"))
		require.NoError(t, c.Remove(ctx, "v1"))
	})
	t.Run("a removed volume is gone", func(t *testing.T) {
		_, err := c.Get(ctx, "v1")
		require.ErrorIs(t, err, discovery.ErrPluginFailed)
		require.ErrorContains(t, err, "no such volume: v1")
		vols, err := c.List(ctx)
		require.NoError(t, err)
		require.Len(t, vols, 1)
		require.Equal(t, "v2", vols[0].Name)
	})
}

func TestRequestsHaveDockersShape(t *testing.T) {
	var mu sync.Mutex
	got := map[string]string{} // path → raw request body
	c := startFake(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got[r.URL.Path] = string(body)
		mu.Unlock()
		answer(w, `{"Mountpoint": "/m", "Volume": {"Name": "v"}, "Volumes": [], "Capabilities": {"Scope": "local"}}`)
	})
	ctx := context.Background()
	require.NoError(t, c.Create(ctx, "v", map[string]string{"size": "1G"}))
	require.NoError(t, c.Remove(ctx, "v"))
	_, err := c.Mount(ctx, "v", "c1")
	require.NoError(t, err)
	require.NoError(t, c.Unmount(ctx, "v", "c1"))
	_, err = c.Path(ctx, "v")
	require.NoError(t, err)
	_, err = c.Get(ctx, "v")
	require.NoError(t, err)
	_, err = c.List(ctx)
	require.NoError(t, err)
	_, err = c.Capabilities(ctx)
	require.NoError(t, err)

	tests := []struct {
		name, path, body string
	}{
		{"create sends Name and Opts", "/VolumeDriver.Create", `{"Name":"v","Opts":{"size":"1G"}}`},
		{"remove sends Name", "/VolumeDriver.Remove", `{"Name":"v"}`},
		{"mount sends Name and ID", "/VolumeDriver.Mount", `{"Name":"v","ID":"c1"}`},
		{"unmount sends Name and ID", "/VolumeDriver.Unmount", `{"Name":"v","ID":"c1"}`},
		{"path sends Name", "/VolumeDriver.Path", `{"Name":"v"}`},
		{"get sends Name", "/VolumeDriver.Get", `{"Name":"v"}`},
		{"list sends an empty object", "/VolumeDriver.List", `{}`},
		{"capabilities sends an empty object", "/VolumeDriver.Capabilities", `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			defer mu.Unlock()
			require.JSONEq(t, tt.body, got[tt.path])
		})
	}
}

func TestCreateWithoutOptionsSendsNullOptsAsDockerDoes(t *testing.T) {
	var req map[string]any
	c := startFake(t, func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewDecoder(r.Body).Decode(&req)
		answer(w, `{}`)
	})
	require.NoError(t, c.Create(context.Background(), "v", nil))
	require.Equal(t, map[string]any{"Name": "v", "Opts": nil}, req)
}

func TestCapabilitiesFollowDocker(t *testing.T) {
	tests := []struct {
		name      string
		status    int
		body      string
		wantScope string
		wantErr   error
	}{
		{"a plugin without the call is local", http.StatusNotFound, "404 page not found", dockervolume.ScopeLocal, nil},
		{"no scope is local", http.StatusOK, `{"Capabilities": {}}`, dockervolume.ScopeLocal, nil},
		{"the scope is lower-cased", http.StatusOK, `{"Capabilities": {"Scope": "GLOBAL"}}`, dockervolume.ScopeGlobal, nil},
		{"an unknown scope is an error", http.StatusOK, `{"Capabilities": {"Scope": "cluster"}}`, "", dockervolume.ErrUnknownScope},
		{"a failing plugin is an error", http.StatusInternalServerError, `{"Err": "boom"}`, "", discovery.ErrPluginFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := startFake(t, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			})
			caps, err := c.Capabilities(context.Background())
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantScope, caps.Scope)
		})
	}
}

func TestGetWithoutAVolume(t *testing.T) {
	c := startFake(t, func(w http.ResponseWriter, _ *http.Request) {
		answer(w, `{"Volume": null}`)
	})
	_, err := c.Get(context.Background(), "v")
	require.ErrorIs(t, err, dockervolume.ErrNoSuchVolume)
	require.EqualError(t, err, `no such volume: plugin "mem" has no volume "v"`)
}

func TestAnErrFieldInA200AnswerIsAnError(t *testing.T) {
	c := startFake(t, func(w http.ResponseWriter, _ *http.Request) {
		answer(w, `{"Mountpoint": "", "Err": "device busy"}`)
	})
	_, err := c.Mount(context.Background(), "v", "c1")
	require.ErrorIs(t, err, discovery.ErrPluginFailed)
	require.EqualError(t, err, `mount volume "v": plugin returned an error: plugin "mem", VolumeDriver.Mount: device busy`)
}

func TestEmptyVolumeNamesAreRefusedBeforeSending(t *testing.T) {
	var calls int
	var mu sync.Mutex
	c := startFake(t, func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		calls++
		mu.Unlock()
		answer(w, `{}`)
	})
	ctx := context.Background()
	tests := []struct {
		name string
		call func() error
	}{
		{"create", func() error { return c.Create(ctx, "", nil) }},
		{"remove", func() error { return c.Remove(ctx, "") }},
		{"mount", func() error { _, err := c.Mount(ctx, "", "id"); return err }},
		{"unmount", func() error { return c.Unmount(ctx, "", "id") }},
		{"path", func() error { _, err := c.Path(ctx, ""); return err }},
		{"get", func() error { _, err := c.Get(ctx, ""); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			require.ErrorIs(t, err, dockervolume.ErrInvalidArgument)
			require.ErrorContains(t, err, "volume name must not be empty")
		})
	}
	mu.Lock()
	defer mu.Unlock()
	require.Zero(t, calls)
}

func TestCallsStopAtTheContextDeadline(t *testing.T) {
	release := make(chan struct{})
	c := startFake(t, func(http.ResponseWriter, *http.Request) { <-release })
	t.Cleanup(func() { close(release) })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.List(ctx)
	require.ErrorIs(t, err, discovery.ErrTimeout)
	require.ErrorContains(t, err, "list volumes: ")
}
