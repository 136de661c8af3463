package discovery

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
)

func TestValidateName(t *testing.T) {
	tests := []struct {
		name    string
		plugin  string
		wantErr bool
	}{
		{"a short lowercase name is fine", "flocker", false},
		{"dots, dashes and digits are fine", "my-plugin.v2", false},
		{"a name of exactly 128 bytes is fine", strings.Repeat("a", MaxNameLen), false},
		{"an empty name is refused", "", true},
		{"a name of 129 bytes is refused", strings.Repeat("a", MaxNameLen+1), true},
		{"a parent-directory name is refused", "..", true},
		{"a current-directory name is refused", ".", true},
		{"a path traversal is refused", "../../etc/passwd", true},
		{"a slash is refused", "a/b", true},
		{"a backslash is refused", `a\b`, true},
		{"a NUL byte is refused", "a\x00b", true},
		{"a newline is refused", "a\nb", true},
		{"invalid UTF-8 is refused", "a\xffb", true},
		{"a right-to-left override is refused", "gpj\u202Eexe", true},
		{"a zero-width space is refused", "a\u200Bb", true},
		{"a left-to-right isolate is refused", "a\u2066b", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateName(tt.plugin)
			if !tt.wantErr {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidName)
			require.True(t, strings.HasPrefix(err.Error(), ErrInvalidName.Error()+": "), err.Error())
		})
	}
}

// parseCase is one spec file's content and what parsing it gives.
type parseCase struct {
	name    string
	input   string
	want    Candidate // address fields only
	wantErr error
}

// checkParse parses each case as a file of kind for plugin "p".
func checkParse(t *testing.T, kind Kind, cases []parseCase) {
	t.Helper()
	source := "/etc/docker/plugins/p." + string(kind)
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			c := Candidate{Name: "p", Kind: kind, Source: source}
			parse := c.parseSpec
			if kind == KindJSON {
				parse = c.parseJSON
			}
			err := parse([]byte(tt.input))
			if tt.wantErr != nil {
				requirePluginError(t, err, tt.wantErr, "p", source)
				return
			}
			require.NoError(t, err)
			tt.want.Name, tt.want.Kind, tt.want.Source = "p", kind, source
			require.Equal(t, tt.want, c)
		})
	}
}

func TestParseSpecText(t *testing.T) {
	checkParse(t, KindSpec, []parseCase{
		{"a unix URL gives the socket path", "unix:///run/x.sock\n", Candidate{Addr: "unix:///run/x.sock", SocketPath: "/run/x.sock"}, nil},
		{"a tcp URL gives host and port, in plain HTTP", "  tcp://10.0.0.1:8080  ", Candidate{Addr: "tcp://10.0.0.1:8080", TCPAddr: "10.0.0.1:8080"}, nil},
		{"an IPv6 tcp URL keeps its brackets in host:port", "tcp://[::1]:9000", Candidate{Addr: "tcp://[::1]:9000", TCPAddr: "[::1]:9000"}, nil},
		{"a unix path that is not clean is a bad address", "unix:///run/./p.sock", Candidate{}, ErrBadAddress},
		{"a unix path of one dot, found by fuzzing, is a bad address", "uniX:/.", Candidate{}, ErrBadAddress},
		{"an http URL without port uses 80", "http://plugins.example", Candidate{Addr: "http://plugins.example", TCPAddr: "plugins.example:80"}, nil},
		{"an https URL uses TLS without verification and port 443, as Docker's local plugins", "https://plugins.example/", Candidate{Addr: "https://plugins.example/", TCPAddr: "plugins.example:443", TLS: &TLSConfig{InsecureSkipVerify: true}}, nil},
		{"an empty file is a bad spec", " \n", Candidate{}, ErrBadSpec},
		{"words are a bad spec", "just some words", Candidate{}, ErrBadSpec},
		{"binary garbage is a bad spec", "\x00\x01\x02garbage", Candidate{}, ErrBadSpec},
		{"an ftp URL has a bad scheme", "ftp://host:21", Candidate{}, ErrBadScheme},
		{"a named pipe has a bad scheme", "npipe:////./pipe/x", Candidate{}, ErrBadScheme},
		{"a tcp URL without host is a bad address", "tcp://", Candidate{}, ErrBadAddress},
		{"a tcp URL with only a port is a bad address", "tcp://:8080", Candidate{}, ErrBadAddress},
		{"a tcp URL without port is a bad address", "tcp://localhost", Candidate{}, ErrBadAddress},
		{"a tcp URL with a path is a bad address", "tcp://h:1/some/path", Candidate{}, ErrBadAddress},
		{"a URL with a query is a bad address", "tcp://h:1?x=1", Candidate{}, ErrBadAddress},
		{"a URL with a user is a bad address", "tcp://me@h:1", Candidate{}, ErrBadAddress},
		{"a relative unix path in the host part is a bad address", "unix://x.sock", Candidate{}, ErrBadAddress},
		{"an opaque unix path is a bad address", "unix:x.sock", Candidate{}, ErrBadAddress},
		{"a unix path of 108 bytes is too long", "unix:///" + strings.Repeat("a", MaxSocketPathLen), Candidate{}, ErrSocketPathTooLong},
		{"an address the registry's limit holds", "tcp://" + strings.Repeat("h", registry.MaxAddressLen-len("tcp://:1")) + ":1",
			Candidate{Addr: "tcp://" + strings.Repeat("h", registry.MaxAddressLen-len("tcp://:1")) + ":1", TCPAddr: strings.Repeat("h", registry.MaxAddressLen-len("tcp://:1")) + ":1"}, nil},
		{"an address over the registry's limit, as it keeps it (tcp://host:443), is a bad address", "https://" + strings.Repeat("h", registry.MaxAddressLen-len("tcp://:443")+1), Candidate{}, ErrBadAddress},
	})
}

func TestParseSpecJSON(t *testing.T) {
	checkParse(t, KindJSON, []parseCase{
		{"a unix address, Name ignored as in Docker", `{"Name": "other", "Addr": "unix:///run/p.sock"}`, Candidate{Addr: "unix:///run/p.sock", SocketPath: "/run/p.sock"}, nil},
		{
			"a tcp address with TLS settings is plain HTTP, as in Docker",
			`{"Addr": "tcp://10.0.0.1:443", "TLSConfig": {"InsecureSkipVerify": true, "CAFile": "/ca.pem"}}`,
			Candidate{Addr: "tcp://10.0.0.1:443", TCPAddr: "10.0.0.1:443"},
			nil,
		},
		{"a tcp address without TLS settings is plain HTTP", `{"Addr": "tcp://10.0.0.1:80"}`, Candidate{Addr: "tcp://10.0.0.1:80", TCPAddr: "10.0.0.1:80"}, nil},
		{"TLS settings on a unix address are ignored, as in Docker", `{"Addr": "unix:///run/p.sock", "TLSConfig": {}}`, Candidate{Addr: "unix:///run/p.sock", SocketPath: "/run/p.sock"}, nil},
		{"TLS settings that do not load break a unix address, as in Docker", `{"Addr": "unix:///run/p.sock", "TLSConfig": {"CAFile": "/nonexistent/ca.pem"}}`, Candidate{}, ErrTLSConfig},
		{"TLS settings that do not load break a tcp address, as in Docker", `{"Addr": "tcp://h:1", "TLSConfig": {"CertFile": "/nonexistent/c.pem", "KeyFile": "/nonexistent/k.pem"}}`, Candidate{}, ErrTLSConfig},
		{"unknown fields are ignored, as in Docker", `{"Addr": "tcp://h:1", "Version": 3}`, Candidate{Addr: "tcp://h:1", TCPAddr: "h:1"}, nil},
		{"invalid JSON is a bad spec", `{"Addr": `, Candidate{}, ErrBadSpec},
		{"a JSON array is a bad spec", `["tcp://h:1"]`, Candidate{}, ErrBadSpec},
		{"a number for Addr is a bad spec", `{"Addr": 5}`, Candidate{}, ErrBadSpec},
		{"a string for InsecureSkipVerify is a bad spec", `{"Addr": "tcp://h:1", "TLSConfig": {"InsecureSkipVerify": "yes"}}`, Candidate{}, ErrBadSpec},
		{"a missing Addr is a bad spec", `{"Name": "p"}`, Candidate{}, ErrBadSpec},
		{"trailing garbage is a bad spec", `{"Addr": "tcp://h:1"} junk`, Candidate{}, ErrBadSpec},
		{"TLS settings with plain http are unused, as in Docker", `{"Addr": "http://h:1", "TLSConfig": {}}`, Candidate{Addr: "http://h:1", TCPAddr: "h:1"}, nil},
		{"an https address with a CA verifies", `{"Addr": "https://h:1", "TLSConfig": {"CAFile": "/ca.pem"}}`, Candidate{Addr: "https://h:1", TCPAddr: "h:1", TLS: &TLSConfig{CAFile: "/ca.pem"}}, nil},
		{"an https address with TLS settings but no CA skips verification", `{"Addr": "https://h:1", "TLSConfig": {"CertFile": "/c.pem", "KeyFile": "/k.pem"}}`, Candidate{Addr: "https://h:1", TCPAddr: "h:1", TLS: &TLSConfig{InsecureSkipVerify: true, CertFile: "/c.pem", KeyFile: "/k.pem"}}, nil},
		{"an https address without TLS settings verifies against the system roots", `{"Addr": "https://h:1"}`, Candidate{Addr: "https://h:1", TCPAddr: "h:1", TLS: &TLSConfig{}}, nil},
		{"a relative unix address is a bad address", `{"Addr": "unix://p.sock"}`, Candidate{}, ErrBadAddress},
		{"an unknown scheme is a bad scheme", `{"Addr": "gopher://h:70"}`, Candidate{}, ErrBadScheme},
		{"a TLS path over the registry's limit is unusable TLS", `{"Addr": "https://h:1", "TLSConfig": {"CAFile": "/` + strings.Repeat("c", registry.MaxTLSPathLen) + `"}}`, Candidate{}, ErrTLSConfig},
	})
}

// requirePluginError checks that err is a *PluginError of kind about plugin
// name in file path, and that its message says so.
func requirePluginError(t *testing.T, err, kind error, name, path string) {
	t.Helper()
	require.ErrorIs(t, err, kind)
	var pe *PluginError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, name, pe.Name)
	require.Equal(t, path, pe.Path)
	msg := err.Error()
	require.True(t, strings.HasPrefix(msg, kind.Error()+": "), msg)
	require.Contains(t, msg, `plugin "`+name+`"`)
	require.Contains(t, msg, path)
	require.Equal(t, 1, strings.Count(msg, kind.Error()), "the prefix is not repeated: %s", msg)
}

func TestConnectionInfoRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		c    Candidate
		want *messages.ConnectionInfo
	}{
		{
			name: "a socket becomes a socket path",
			c:    Candidate{Name: "p", Addr: "unix:///run/p.sock", SocketPath: "/run/p.sock"},
			want: &messages.ConnectionInfo{SocketPath: "/run/p.sock"},
		},
		{
			name: "a plain tcp address becomes an address",
			c:    Candidate{Name: "p", Addr: "tcp://h:1", TCPAddr: "h:1"},
			want: &messages.ConnectionInfo{Address: "tcp://h:1"},
		},
		{
			name: "TLS settings travel along",
			c:    Candidate{Name: "p", Addr: "https://h:1", TCPAddr: "h:1", TLS: &TLSConfig{CAFile: "/ca", CertFile: "/c", KeyFile: "/k"}},
			want: &messages.ConnectionInfo{Address: "tcp://h:1", Tls: &messages.TLSConfig{CaFile: "/ca", CertFile: "/c", KeyFile: "/k"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ci := tt.c.ConnectionInfo()
			require.Equal(t, tt.want.GetSocketPath(), ci.GetSocketPath())
			require.Equal(t, tt.want.GetAddress(), ci.GetAddress())
			require.Equal(t, tt.want.GetTls().String(), ci.GetTls().String())
			back, err := FromConnectionInfo("p", ci)
			require.NoError(t, err)
			require.Equal(t, tt.c, back)
		})
	}
}

func TestFromConnectionInfoRefusesBadInput(t *testing.T) {
	tests := []struct {
		name    string
		plugin  string
		ci      *messages.ConnectionInfo
		wantErr error
	}{
		{"nothing set", "p", &messages.ConnectionInfo{}, ErrBadAddress},
		{"both set", "p", &messages.ConnectionInfo{SocketPath: "/p.sock", Address: "tcp://h:1"}, ErrBadAddress},
		{"a relative socket path", "p", &messages.ConnectionInfo{SocketPath: "p.sock"}, ErrBadAddress},
		{"a socket path over 107 bytes", "p", &messages.ConnectionInfo{SocketPath: "/" + strings.Repeat("s", MaxSocketPathLen)}, ErrSocketPathTooLong},
		{"an address with a bad scheme", "p", &messages.ConnectionInfo{Address: "ftp://h:1"}, ErrBadScheme},
		{"a bad plugin name", "../p", &messages.ConnectionInfo{SocketPath: "/p.sock"}, ErrInvalidName},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromConnectionInfo(tt.plugin, tt.ci)
			require.ErrorIs(t, err, tt.wantErr)
		})
	}
}

func TestTLSClientConfigRefusesBadSettings(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	writeFile(t, notPEM, "not a certificate")
	tests := []struct {
		name string
		tls  TLSConfig
	}{
		{"a missing CA file", TLSConfig{CAFile: filepath.Join(dir, "missing.pem")}},
		{"a CA file without certificates", TLSConfig{CAFile: notPEM}},
		{"a certificate without its key", TLSConfig{CertFile: notPEM}},
		{"a key without its certificate", TLSConfig{KeyFile: notPEM}},
		{"a key pair that does not parse", TLSConfig{CertFile: notPEM, KeyFile: notPEM}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.tls.ClientConfig()
			require.ErrorIs(t, err, ErrTLSConfig)
			require.Equal(t, 1, strings.Count(err.Error(), ErrTLSConfig.Error()), err.Error())
		})
	}
}

func TestPluginErrorWithoutPathOrDetails(t *testing.T) {
	err := &PluginError{Name: "p", Kind: ErrNotFound}
	require.Equal(t, `plugin not found: plugin "p"`, err.Error())
	require.True(t, errors.Is(err, ErrNotFound))
}
