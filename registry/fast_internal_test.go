package registry

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/names"
)

// The fast paths may only say "certainly valid": whatever they accept, the
// full checks accept too, and the common case takes them.

func TestPlainIDAcceptsOnlyWhatNamesCheckAccepts(t *testing.T) {
	for _, v := range []string{"csi-node", "p0", "a-1.b_c", "x", "a.b", strings.Repeat("a", MaxIDLen)} {
		require.True(t, plainID(v), v)
		require.NoError(t, names.Check("id", v), v)
	}
	for _, v := range []string{"", ".", "..", "a..b", "a/b", `a\b`, "a\nb", "a\x00b", "a\x7fb", "é", "ev\u202Elif",
		strings.Repeat("a", MaxIDLen+1)} {
		require.False(t, plainID(v), "%q", v)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := "ab./\\\x00\x1f\x7f \u00e9\u202e"
	for range 20000 {
		v := randomString(rng, alphabet, 6)
		if plainID(v) {
			require.NoError(t, names.Check("id", v), "%q", v)
		}
	}
}

func TestPlainSocketPathAcceptsOnlyWhatCheckSocketPathAccepts(t *testing.T) {
	for _, v := range []string{"/run/plugvisor/a0/csi.sock", "/a", "/a.b/c..d/.e"} {
		require.True(t, plainSocketPath(v), v)
		require.NoError(t, names.CheckSocketPath("socket path", v), v)
	}
	for _, v := range []string{"", "/", "a/b", "/a/", "//a", "/a//b", "/a/./b", "/a/../b", "/a/.", "/a/..", "/a\nb",
		"/" + strings.Repeat("a", MaxSocketPathLen)} {
		require.False(t, plainSocketPath(v), "%q", v)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		v := randomString(rng, "a./\x00\u202e", 7)
		if plainSocketPath(v) {
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
	require.True(t, plainPlugin(ok))
	require.NoError(t, ValidatePlugin(ok))
	for name, change := range map[string]func(p *messages.PluginInfo){
		"no connection":     func(p *messages.PluginInfo) { p.Connection = nil },
		"an address":        func(p *messages.PluginInfo) { p.Connection = &messages.ConnectionInfo{Address: "tcp://h:1"} },
		"an empty key":      func(p *messages.PluginInfo) { p.Options = map[string]string{"": "v"} },
		"a long version":    func(p *messages.PluginInfo) { p.Version = strings.Repeat("v", MaxVersionLen+1) },
		"a long registrant": func(p *messages.PluginInfo) { p.RegisteredBy = strings.Repeat("v", MaxVersionLen+1) },
		"a bad name":        func(p *messages.PluginInfo) { p.Name = ".." },
		"no type":           func(p *messages.PluginInfo) { p.Type = "" },
		"a long TLS path": func(p *messages.PluginInfo) {
			p.Connection.Tls = &messages.TLSConfig{CaFile: "/" + strings.Repeat("c", MaxTLSPathLen)}
		},
	} {
		p := proto.Clone(ok).(*messages.PluginInfo)
		change(p)
		require.False(t, plainPlugin(p), name)
		// The full check decides, and says why, for each of these.
		require.Equal(t, ValidatePlugin(p), validatePlugin(p), name)
	}
}

// TestCopyPluginCopiesEveryField fills every field of PluginInfo and
// ConnectionInfo: a field added to the messages and not to copyPlugin
// fails here.
func TestCopyPluginCopiesEveryField(t *testing.T) {
	p := &messages.PluginInfo{}
	fill(t, p.ProtoReflect())
	got := copyPlugin(p).info()
	require.True(t, proto.Equal(p, got), "copy: %v\norig: %v", got, p)
	requireOneBlock(t, got, pluginStringBytes(p))
	require.NotSame(t, p.Connection, got.Connection)
	require.NotSame(t, p.Connection.Tls, got.Connection.Tls)
	got.Options["k"] = "changed"
	require.NotEqual(t, "changed", p.Options["k"], "the options are copied, not shared")
}

// TestCopyPluginKeepsNothingOfTheOriginal: a registration whose strings
// are views of one buffer of the caller's, with options, TLS settings and
// unknown fields, is copied whole: no string of the copy points into the
// caller's buffer, all of them sit in one block of the copy's own, exactly
// as large as they are together, and changing the original's options, TLS
// settings and unknown fields afterwards leaves the copy as it was.
func TestCopyPluginKeepsNothingOfTheOriginal(t *testing.T) {
	unknown := protowire.AppendString(protowire.AppendTag(nil, 99, protowire.BytesType), "newer")
	var buf []byte
	views := map[string]int{} // start of each part in buf
	for _, part := range []string{"csi-node", "plugin", "v1", "alloc-1", "agent", "/run/p.sock", "tcp://h:1", "ca", "cert", "key", "opt", "value"} {
		views[part] = len(buf)
		buf = append(buf, part...)
	}
	view := func(part string) string { return unsafe.String(&buf[views[part]], len(part)) }
	p := &messages.PluginInfo{
		Type: view("csi-node"), Name: view("plugin"), Version: view("v1"), AllocId: view("alloc-1"), RegisteredBy: view("agent"),
		Options: map[string]string{view("opt"): view("value")},
		Connection: &messages.ConnectionInfo{
			SocketPath: view("/run/p.sock"), Address: view("tcp://h:1"),
			Tls: &messages.TLSConfig{InsecureSkipVerify: true, CaFile: view("ca"), CertFile: view("cert"), KeyFile: view("key")},
		},
	}
	for _, m := range []proto.Message{p, p.Connection, p.Connection.Tls} {
		require.NoError(t, proto.UnmarshalOptions{Merge: true}.Unmarshal(unknown, m))
	}
	want := proto.Clone(p).(*messages.PluginInfo)
	got := copyPlugin(p).info()
	require.True(t, proto.Equal(want, got), "copy: %v\nwant: %v", got, want)

	first, last := unsafe.Pointer(&buf[0]), unsafe.Pointer(&buf[len(buf)-1])
	for _, v := range pluginStrings(got) {
		at := unsafe.Pointer(unsafe.StringData(v))
		require.False(t, uintptr(at) >= uintptr(first) && uintptr(at) <= uintptr(last), "the copy's %q points into the caller's buffer", v)
	}
	requireOneBlock(t, got, len(buf))

	p.Options[view("opt")] = "changed"
	p.Connection.Tls.InsecureSkipVerify = false
	for _, m := range []proto.Message{p, p.Connection, p.Connection.Tls} {
		u := m.ProtoReflect().GetUnknown()
		u[len(u)-1] = 'x'
	}
	require.False(t, proto.Equal(want, p), "the original changed")
	require.True(t, proto.Equal(want, got), "copy after the original changed: %v\nwant: %v", got, want)
}

// pluginStrings returns every non-empty string of p: its fields, its
// options' keys and values, and its connection's and TLS settings'.
func pluginStrings(p *messages.PluginInfo) []string {
	all := []string{p.GetType(), p.GetName(), p.GetVersion(), p.GetAllocId(), p.GetRegisteredBy(),
		p.GetConnection().GetSocketPath(), p.GetConnection().GetAddress(),
		p.GetConnection().GetTls().GetCaFile(), p.GetConnection().GetTls().GetCertFile(), p.GetConnection().GetTls().GetKeyFile()}
	for k, v := range p.GetOptions() {
		all = append(all, k, v)
	}
	var out []string
	for _, v := range all {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}

// requireOneBlock fails unless every string of p lies in one span of
// memory size bytes long, size being what they add up to (pluginStringBytes).
func requireOneBlock(t *testing.T, p *messages.PluginInfo, size int) {
	t.Helper()
	require.Equal(t, size, pluginStringBytes(p))
	low, high := ^uintptr(0), uintptr(0)
	for _, v := range pluginStrings(p) {
		at := uintptr(unsafe.Pointer(unsafe.StringData(v)))
		low, high = min(low, at), max(high, at+uintptr(len(v)))
	}
	require.Equal(t, uintptr(size), high-low, "the copy's strings span %d bytes, in one block of %d", high-low, size)
}

// TestCopyPluginLeavesItsArgumentWhereItWas: copying a registration built
// for the call costs two allocations, the allocation and its strings'
// block; were copyPlugin to keep a reference to its argument, Go would
// move the PluginInfo and ConnectionInfo (and here the socket path made
// for them) to the heap as well. RegisterPlugin hands its argument to
// copyPlugin alone.
func TestCopyPluginLeavesItsArgumentWhereItWas(t *testing.T) {
	alloc := "alloc-1"
	var kept *allocation
	allocs := testing.AllocsPerRun(100, func() {
		kept = copyPlugin(&messages.PluginInfo{
			Type: "csi-node", Name: "p", AllocId: alloc,
			Connection: &messages.ConnectionInfo{SocketPath: "/run/" + alloc + "/csi.sock"},
		})
	})
	require.Equal(t, "/run/alloc-1/csi.sock", kept.info().GetConnection().GetSocketPath())
	require.EqualValues(t, 2, allocs, "allocations of one copy")
}

// fill sets every scalar, map and message field of m (messages
// recursively, for ConnectionInfo and PluginInfo).
func fill(t *testing.T, m protoreflect.Message) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		switch {
		case f.IsMap():
			mp := m.Mutable(f).Map()
			mp.Set(protoreflect.ValueOfString("k").MapKey(), protoreflect.ValueOfString("v"))
		case f.Kind() == protoreflect.MessageKind:
			fill(t, m.Mutable(f).Message())
		case f.Kind() == protoreflect.StringKind:
			m.Set(f, protoreflect.ValueOfString(string(f.Name())+"-value"))
		case f.Kind() == protoreflect.BoolKind:
			m.Set(f, protoreflect.ValueOfBool(true))
		case f.IsList():
			t.Fatalf("copyPlugin's test does not fill list field %s yet", f.FullName())
		default:
			t.Fatalf("copyPlugin's test does not fill field %s of kind %s yet", f.FullName(), f.Kind())
		}
	}
}

// TestAnAllocationIsOneObjectOf224Bytes: an allocation holds its
// PluginInfo and ConnectionInfo inline and one sequence, 224 bytes, a Go
// size class; a field more moves every plugin to the 240-byte class. An
// updated one keeps its second sequence after it, and each reports its
// own order and changed.
func TestAnAllocationIsOneObjectOf224Bytes(t *testing.T) {
	require.EqualValues(t, 224, unsafe.Sizeof(allocation{}))
	p := &messages.PluginInfo{Type: "csi-node", Name: "p", AllocId: "a", Connection: &messages.ConnectionInfo{SocketPath: "/s.sock"}}
	a, u := newAllocation(p, 7, 7), newAllocation(p, 7, 9)
	require.Equal(t, [2]uint64{7, 7}, [2]uint64{a.order(), a.changed()})
	require.Equal(t, [2]uint64{7, 9}, [2]uint64{u.order(), u.changed()})
	require.Same(t, &a.conn, a.info().Connection, "the ConnectionInfo is the allocation's own")
	require.True(t, proto.Equal(p, u.info()))
}
