package plain_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/names"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/registry/internal/plain"
)

// bounds are the registry's.
var bounds = plain.Bounds{Version: registry.MaxVersionLen, Options: registry.MaxOptions, Option: registry.MaxOptionLen}

// The fast paths may only say "certainly valid": whatever they accept, the
// full checks accept too, and the common case takes them.

func TestPlainIDAcceptsOnlyWhatNamesCheckAccepts(t *testing.T) {
	for _, v := range []string{"csi-node", "p0", "a-1.b_c", "x", "a.b", strings.Repeat("a", registry.MaxIDLen)} {
		require.True(t, plain.ID(v), v)
		require.NoError(t, names.Check("id", v), v)
	}
	for _, v := range []string{"", ".", "..", "a..b", "a/b", `a\b`, "a\nb", "a\x00b", "a\x7fb", "é", "ev\u202Elif",
		strings.Repeat("a", registry.MaxIDLen+1)} {
		require.False(t, plain.ID(v), "%q", v)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := "ab./\\\x00\x1f\x7f \u00e9\u202e"
	for range 20000 {
		v := randomString(rng, alphabet, 6)
		if plain.ID(v) {
			require.NoError(t, names.Check("id", v), "%q", v)
		}
	}
}

func TestPlainSocketPathAcceptsOnlyWhatCheckSocketPathAccepts(t *testing.T) {
	for _, v := range []string{"/run/plugvisor/a0/csi.sock", "/a", "/a.b/c..d/.e"} {
		require.True(t, plain.SocketPath(v), v)
		require.NoError(t, names.CheckSocketPath("socket path", v), v)
	}
	for _, v := range []string{"", "/", "a/b", "/a/", "//a", "/a//b", "/a/./b", "/a/../b", "/a/.", "/a/..", "/a\nb",
		"/" + strings.Repeat("a", registry.MaxSocketPathLen)} {
		require.False(t, plain.SocketPath(v), "%q", v)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		v := randomString(rng, "a./\x00\u202e", 7)
		if plain.SocketPath(v) {
			require.NoError(t, names.CheckSocketPath("socket path", v), "%q", v)
		}
	}
}

func randomString(rng *rand.Rand, alphabet string, maxLen int) string {
	runes := []rune(alphabet)
	var b strings.Builder
	for range rng.IntN(maxLen + 1) {
		b.WriteRune(runes[rng.IntN(len(runes))])
	}
	return b.String()
}

func TestPlainPluginAcceptsOnlyValidPlugins(t *testing.T) {
	ok := &messages.PluginInfo{Type: "csi-node", Name: "p", AllocId: "a0", Version: "1.0",
		Connection: &messages.ConnectionInfo{SocketPath: "/run/a0/csi.sock"}, Options: map[string]string{"k": "v"}}
	require.True(t, plain.Plugin(ok, bounds))
	require.NoError(t, registry.ValidatePlugin(ok))
	for name, change := range map[string]func(p *messages.PluginInfo){
		"no connection":     func(p *messages.PluginInfo) { p.Connection = nil },
		"an address":        func(p *messages.PluginInfo) { p.Connection = &messages.ConnectionInfo{Address: "tcp://h:1"} },
		"an empty key":      func(p *messages.PluginInfo) { p.Options = map[string]string{"": "v"} },
		"a long version":    func(p *messages.PluginInfo) { p.Version = strings.Repeat("v", registry.MaxVersionLen+1) },
		"a long registrant": func(p *messages.PluginInfo) { p.RegisteredBy = strings.Repeat("v", registry.MaxVersionLen+1) },
		"a bad name":        func(p *messages.PluginInfo) { p.Name = ".." },
		"no type":           func(p *messages.PluginInfo) { p.Type = "" },
		"a long TLS path": func(p *messages.PluginInfo) {
			p.Connection.Tls = &messages.TLSConfig{CaFile: "/" + strings.Repeat("c", registry.MaxTLSPathLen)}
		},
	} {
		p := proto.Clone(ok).(*messages.PluginInfo)
		change(p)
		require.False(t, plain.Plugin(p, bounds), name)
	}
}
