package localvolume_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/dockervolume/localvolume"
)

// serve runs the plugin on a socket in a temp dir and returns an HTTP
// client for it and the volume root.
func serve(t *testing.T) (*http.Client, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "pvlv")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	socket, root := filepath.Join(dir, "local.sock"), filepath.Join(dir, "vols")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- localvolume.Run(ctx, []string{"-socket", socket, "-root", root}, io.Discard) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	waitServing(t, socket)
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}, root
}

// call posts one VolumeDriver request as Docker does and returns the
// plugin's error text ("" on success).
func call(t *testing.T, c *http.Client, method, body string) string {
	t.Helper()
	resp, err := c.Post("http://plugin/VolumeDriver."+method, "application/vnd.docker.plugins.v1.2+json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct{ Err string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	if resp.StatusCode != http.StatusOK && out.Err == "" {
		out.Err = resp.Status
	}
	return out.Err
}

func TestThePluginNeverTouchesAnythingOutsideOneVolume(t *testing.T) {
	c, root := serve(t)
	require.Empty(t, call(t, c, "Create", `{"Name":"data"}`))
	keep := filepath.Join(root, "data", "keep")
	require.NoError(t, os.WriteFile(keep, []byte("precious"), 0o600))
	outside := filepath.Join(filepath.Dir(root), "outside")
	require.NoError(t, os.WriteFile(outside, []byte("also precious"), 0o600))

	attacks := []struct {
		name, volume, want string
	}{
		{"the root itself, as one dot", ".", `must not be "."`},
		{"the parent, as two dots", "..", `must not contain ".."`},
		{"an empty name", "", "must not be empty"},
		{"a path that climbs out", "../outside", "path separator"},
		{"a name holding a separator", "data/keep", "path separator"},
		{"a right-to-left override", "dat\u202Ea", "bidirectional"},
		{"a zero-width joiner", "da\u200Dta", "zero-width"},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			body, err := json.Marshal(map[string]string{"Name": a.volume})
			require.NoError(t, err)
			require.Contains(t, call(t, c, "Create", string(body)), a.want)
			require.Contains(t, call(t, c, "Remove", string(body)), a.want)
			require.Contains(t, call(t, c, "Path", string(body)), a.want)

			got, err := os.ReadFile(keep)
			require.NoError(t, err, "a volume's data was wiped")
			require.Equal(t, "precious", string(got))
			_, err = os.Stat(outside)
			require.NoError(t, err, "a file outside the root was removed")
		})
	}
}

func TestThePluginRefusesAVolumeDirectoryReplacedByALink(t *testing.T) {
	c, root := serve(t)
	target := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(target, "keep"), []byte("x"), 0o600))
	require.NoError(t, os.Symlink(target, filepath.Join(root, "linked")))

	require.Contains(t, call(t, c, "Create", `{"Name":"linked"}`), "not a directory")
	_, err := os.Stat(filepath.Join(target, "keep"))
	require.NoError(t, err)
}
