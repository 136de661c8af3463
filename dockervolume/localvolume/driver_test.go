package localvolume_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/volume"
	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/plugvisor/plugvisor/discovery"
	"github.com/plugvisor/plugvisor/dockervolume"
	"github.com/plugvisor/plugvisor/dockervolume/localvolume"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitServing waits until the plugin accepts connections on socket. The
// socket file appears at bind, before listen, so its existence is not
// enough: a connection then is refused.
func waitServing(t *testing.T, socket string) {
	t.Helper()
	require.Eventually(t, func() bool {
		c, err := net.Dial("unix", socket)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 30*time.Second, 10*time.Millisecond, "the plugin serves on %s", socket)
}

func TestThePluginServesDockersVolumeProtocol(t *testing.T) {
	dir, err := os.MkdirTemp("", "pvlv")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "local.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- localvolume.Run(ctx, []string{"-socket", socket, "-root", filepath.Join(dir, "vols")}, os.Stderr)
	}()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })

	waitServing(t, socket)
	candidate, err := discovery.Lookup(discovery.Dirs{Sockets: []string{dir}}, "local")
	require.NoError(t, err)
	manifest, err := discovery.Activate(ctx, candidate, discovery.ActivateOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"VolumeDriver"}, manifest.Implements)

	c := dockervolume.NewClient(candidate)
	require.NoError(t, c.Create(ctx, "data", nil))
	path, err := c.Mount(ctx, "data", "m1")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(path, "hello"), []byte("hi"), 0o644))
	require.ErrorContains(t, c.Remove(ctx, "data"), "mounted 1 times")
	require.NoError(t, c.Unmount(ctx, "data", "m1"))
	vols, err := c.List(ctx)
	require.NoError(t, err)
	require.Len(t, vols, 1)
	require.ErrorContains(t, c.Create(ctx, "../etc", nil), "must not contain a path separator")
	require.NoError(t, c.Remove(ctx, "data"))
	_, err = os.Stat(path)
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestThePluginNeverTouchesAnythingOutsideOneVolumeDirectory(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "vols")
	outside := filepath.Join(dir, "outside")
	require.NoError(t, os.MkdirAll(outside, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "keep"), []byte("x"), 0o644))
	d, err := localvolume.New(root, hclog.NewNullLogger())
	require.NoError(t, err)
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "link")))
	require.NoError(t, os.WriteFile(filepath.Join(root, "afile"), nil, 0o644))

	for _, name := range []string{".", "..", "../outside", "a/b", `a\b`, "/abs", "", "x", ".hidden", "link", "afile", "a\x00b"} {
		t.Run(fmt.Sprintf("%q is refused", name), func(t *testing.T) {
			err := d.Create(&volume.CreateRequest{Name: name})
			require.Error(t, err)
			require.NotContains(t, err.Error(), "registry:")
			require.True(t, strings.HasPrefix(err.Error(), "localvolume: "), err.Error())
			_, err = d.Mount(&volume.MountRequest{Name: name, ID: "m"})
			require.Error(t, err)
			require.Error(t, d.Remove(&volume.RemoveRequest{Name: name}))
		})
	}
	entries, err := os.ReadDir(outside)
	require.NoError(t, err)
	require.Len(t, entries, 1, "nothing outside the root was created or removed")
	fi, err := os.Lstat(filepath.Join(root, "link"))
	require.NoError(t, err)
	require.Equal(t, os.ModeSymlink, fi.Mode().Type(), "the symlink was left alone")
}
