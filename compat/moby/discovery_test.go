package moby_test

import (
	"net"
	"testing"

	"github.com/docker/docker/pkg/plugins"
	"github.com/docker/go-plugins-helpers/volume"
	"github.com/stretchr/testify/require"
)

// Rows of docs/docker.md's discovery differences, Docker's side: its
// plugin client dials a scheme other than unix and https (ftp://, say) as
// a TCP address in plain HTTP, and a tcp:// address with a path at its
// host and port, dropping the path: a plugin's HTTP server there answers
// Plugin.Activate as if the spec had said tcp://host:port. plugvisor's
// discovery refuses both (discovery's TestParseSpecText: ErrBadScheme,
// ErrBadAddress "has a path").
func TestDockerDialsAnyOtherSchemeAndIgnoresAPathAsPlainHTTP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = volume.NewHandler(&memDriver{plugin: plugin{name: "v", scope: "local"}, vols: map[string]bool{}}).Serve(l)
	}()
	t.Cleanup(func() { l.Close(); <-done })

	for _, addr := range []string{"ftp://" + l.Addr().String(), "tcp://" + l.Addr().String() + "/some/path"} {
		c, err := plugins.NewClient(addr, nil)
		require.NoError(t, err, addr)
		var manifest plugins.Manifest
		require.NoError(t, c.Call("Plugin.Activate", nil, &manifest), addr)
		require.Equal(t, []string{"VolumeDriver"}, manifest.Implements, addr)
	}
}
