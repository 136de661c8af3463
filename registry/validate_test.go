package registry_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
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

// TestValidatePluginBoundsAddressesAndTLSPaths: a network address and each
// TLS file path have a length limit, named in the error; at the limit they
// pass.
func TestValidatePluginBoundsAddressesAndTLSPaths(t *testing.T) {
	withAddress := func(addr string) *messages.PluginInfo {
		info := plugin(1)
		info.Connection = &messages.ConnectionInfo{Address: addr}
		return info
	}
	host := func(n int) string { return "tcp://" + strings.Repeat("h", n-len("tcp://:1")) + ":1" }
	require.NoError(t, registry.ValidatePlugin(withAddress(host(registry.MaxAddressLen))))
	err := registry.ValidatePlugin(withAddress(host(registry.MaxAddressLen + 1)))
	require.ErrorIs(t, err, registry.ErrInvalid)
	require.ErrorContains(t, err, "2049 bytes, over the limit of 2048")

	for _, field := range []string{"ca_file", "cert_file", "key_file"} {
		for _, n := range []int{registry.MaxTLSPathLen, registry.MaxTLSPathLen + 1} {
			info := withAddress("https://plugins.example")
			tls := &messages.TLSConfig{}
			path := "/" + strings.Repeat("p", n-1)
			switch field {
			case "ca_file":
				tls.CaFile = path
			case "cert_file":
				tls.CertFile = path
			default:
				tls.KeyFile = path
			}
			info.Connection.Tls = tls
			err := registry.ValidatePlugin(info)
			if n == registry.MaxTLSPathLen {
				require.NoError(t, err, field)
				continue
			}
			require.ErrorIs(t, err, registry.ErrInvalid, field)
			require.ErrorContains(t, err, "TLS "+field+" is 4096 bytes, over the limit of 4095")
		}
	}
	long := "/" + strings.Repeat("p", registry.MaxTLSPathLen)
	info := withAddress("https://plugins.example")
	info.Connection.Tls = &messages.TLSConfig{CaFile: long, KeyFile: long}
	err = registry.ValidatePlugin(info)
	require.ErrorContains(t, err, "TLS ca_file is 4096 bytes")
	require.ErrorContains(t, err, "TLS key_file is 4096 bytes", "every problem at once")
}

// TestRegisterPluginRefusesWhatNoValidRegistrationHoldsBeforeCopyingIt: 64
// options whose values share one 1 MiB string would take a 64 MiB copy;
// RegisterPlugin refuses the registration by its size first, allocating
// next to nothing, and so it does one with more options than the limit.
func TestRegisterPluginRefusesWhatNoValidRegistrationHoldsBeforeCopyingIt(t *testing.T) {
	r, _ := newRegistry(t)
	huge := strings.Repeat("v", 1<<20)
	info := plugin(1)
	info.Options = map[string]string{}
	for i := range registry.MaxOptions {
		info.Options[fmt.Sprint("k", i)] = huge
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := r.RegisterPlugin(info)
	runtime.ReadMemStats(&after)
	require.ErrorIs(t, err, registry.ErrInvalid)
	require.ErrorContains(t, err, "plugin info holds 67109")
	require.ErrorContains(t, err, "over its limit: options (keys and values at most 4096 bytes each)")
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "bytes allocated refusing it")

	info = plugin(1)
	info.Options = map[string]string{}
	for i := range registry.MaxOptions + 1 {
		info.Options[fmt.Sprint("k", i)] = ""
	}
	err = r.RegisterPlugin(info)
	require.ErrorIs(t, err, registry.ErrInvalid)
	require.ErrorContains(t, err, "65 options, over the limit of 64")
	require.Empty(t, r.ListPlugins(info.GetType()))
}
