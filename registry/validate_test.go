package registry_test

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
)

func TestValidatePluginRefusesUnsafeNames(t *testing.T) {
	cases := []struct {
		name   string
		change func(*messages.PluginInfo)
		want   string
	}{
		{"a plugin name of one dot", func(i *messages.PluginInfo) { i.Name = "." }, `plugin name must not be "."`},
		{"an alloc ID of two dots", func(i *messages.PluginInfo) { i.AllocId = ".." }, `alloc ID ".." must not contain ".."`},
		{"a right-to-left override in the name", func(i *messages.PluginInfo) { i.Name = "ev\u202Elif" }, "bidirectional"},
		{"a zero-width space in the type", func(i *messages.PluginInfo) { i.Type = "csi\u200B" }, "zero-width"},
		{"a byte order mark in the alloc ID", func(i *messages.PluginInfo) { i.AllocId = "\uFEFFa" }, "zero-width"},
		{"a newline in the name", func(i *messages.PluginInfo) { i.Name = "a\nb" }, "control character"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			info := plugin(1)
			tc.change(info)
			err := registry.ValidatePlugin(info)
			require.ErrorIs(t, err, registry.ErrInvalid)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestValidatePluginStillAcceptsNetworkAddresses(t *testing.T) {
	// Spec files give network addresses; discovery registers them through
	// ValidatePlugin, never ValidateRegistration.
	for _, addr := range []string{"tcp://127.0.0.1:9000", "http://plugins.example", "https://plugins.example:8443/"} {
		info := plugin(1)
		info.Connection = &messages.ConnectionInfo{Address: addr}
		require.NoError(t, registry.ValidatePlugin(info), addr)
	}
	for _, addr := range []string{"tcp://h", "http://h/path", "https://u@h", "ftp://h:1", "tcp://h:1?q"} {
		info := plugin(1)
		info.Connection = &messages.ConnectionInfo{Address: addr}
		require.ErrorIs(t, registry.ValidatePlugin(info), registry.ErrInvalid, addr)
	}
}

func TestValidateRegistration(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "plugin.sock")
	l, err := net.Listen("unix", sock)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	regular := filepath.Join(dir, "passwd")
	require.NoError(t, os.WriteFile(regular, []byte("root:x:0:0"), 0o600))

	withSocket := func(path string) *messages.PluginInfo {
		info := plugin(1)
		info.Connection = &messages.ConnectionInfo{SocketPath: path}
		return info
	}
	cases := []struct {
		name string
		info *messages.PluginInfo
		want string // "" when accepted
	}{
		{"a listening unix socket", withSocket(sock), ""},
		{"a socket that does not exist yet", withSocket(filepath.Join(dir, "later.sock")), ""},
		{"a regular file", withSocket(regular), "is a regular file, not a socket"},
		{"a directory", withSocket(dir), "is a directory, not a socket"},
		{"a device", withSocket("/dev/zero"), "is a character device, not a socket"},
		{"a network address", func() *messages.PluginInfo {
			info := plugin(1)
			info.Connection = &messages.ConnectionInfo{Address: "tcp://192.0.2.1:9000"}
			return info
		}(), "unix socket only"},
		{"an invalid name is still refused first", func() *messages.PluginInfo {
			info := withSocket(sock)
			info.Name = "."
			return info
		}(), `must not be "."`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := registry.ValidateRegistration(tc.info)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, registry.ErrInvalid)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// FuzzValidatePlugin: ValidatePlugin never panics, and whatever it accepts
// has names that are safe path elements.
func FuzzValidatePlugin(f *testing.F) {
	f.Add("csi-node", "hostpath", "alloc-1", "v1", "/run/csi.sock", "", "k", "v")
	f.Add("csi-node", ".", "alloc-1", "", "", "tcp://127.0.0.1:1", "", "")
	f.Add("docker", "a\u202Eb", "..", "", "/run/../x", "tcp://[::1]:1", "k", "")
	f.Fuzz(func(t *testing.T, ptype, name, alloc, version, socket, addr, key, value string) {
		info := &messages.PluginInfo{
			Type: ptype, Name: name, AllocId: alloc, Version: version,
			Connection: &messages.ConnectionInfo{SocketPath: socket, Address: addr},
			Options:    map[string]string{key: value},
		}
		if registry.ValidatePlugin(info) != nil {
			return
		}
		for _, id := range []string{ptype, name, alloc} {
			if registry.ValidateID("id", id) != nil {
				t.Fatalf("accepted a plugin with id %q", id)
			}
		}
		if (socket == "") == (addr == "") {
			t.Fatalf("accepted socket %q and address %q", socket, addr)
		}
	})
}
