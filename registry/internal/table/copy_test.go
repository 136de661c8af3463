package table

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/plugvisor/plugvisor/messages"
)

// TestCopyPluginCopiesEveryField fills every field of PluginInfo and
// ConnectionInfo: a field added to the messages and not to Copy
// fails here.
func TestCopyPluginCopiesEveryField(t *testing.T) {
	p := &messages.PluginInfo{}
	fill(t, p.ProtoReflect())
	got := Copy(p).Info()
	require.True(t, proto.Equal(p, got), "copy: %v\norig: %v", got, p)
	requireOneBlock(t, got, StringBytes(p))
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
	got := Copy(p).Info()
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
	require.Equal(t, size, StringBytes(p))
	low, high := ^uintptr(0), uintptr(0)
	for _, v := range pluginStrings(p) {
		at := uintptr(unsafe.Pointer(unsafe.StringData(v)))
		low, high = min(low, at), max(high, at+uintptr(len(v)))
	}
	require.Equal(t, uintptr(size), high-low, "the copy's strings span %d bytes, in one block of %d", high-low, size)
}

// TestCopyPluginLeavesItsArgumentWhereItWas: copying a registration built
// for the call costs two allocations, the allocation and its strings'
// block; were Copy to keep a reference to its argument, Go would
// move the PluginInfo and ConnectionInfo (and here the socket path made
// for them) to the heap as well. RegisterPlugin hands its argument to
// Copy alone.
func TestCopyPluginLeavesItsArgumentWhereItWas(t *testing.T) {
	alloc := "alloc-1"
	var kept *Allocation
	allocs := testing.AllocsPerRun(100, func() {
		kept = Copy(&messages.PluginInfo{
			Type: "csi-node", Name: "p", AllocId: alloc,
			Connection: &messages.ConnectionInfo{SocketPath: "/run/" + alloc + "/csi.sock"},
		})
	})
	require.Equal(t, "/run/alloc-1/csi.sock", kept.Info().GetConnection().GetSocketPath())
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
			t.Fatalf("Copy's test does not fill list field %s yet", f.FullName())
		default:
			t.Fatalf("Copy's test does not fill field %s of kind %s yet", f.FullName(), f.Kind())
		}
	}
}

// TestAnAllocationIsOneObjectOf224Bytes: an allocation holds its
// PluginInfo and ConnectionInfo inline and one sequence, 224 bytes, a Go
// size class; a field more moves every plugin to the 240-byte class. An
// updated one keeps its second sequence after it, and each reports its
// own order and changed.
func TestAnAllocationIsOneObjectOf224Bytes(t *testing.T) {
	require.EqualValues(t, 224, unsafe.Sizeof(Allocation{}))
	p := &messages.PluginInfo{Type: "csi-node", Name: "p", AllocId: "a", Connection: &messages.ConnectionInfo{SocketPath: "/s.sock"}}
	a, u := NewAllocation(p, 7, 7), NewAllocation(p, 7, 9)
	require.Equal(t, [2]uint64{7, 7}, [2]uint64{a.Order(), a.Changed()})
	require.Equal(t, [2]uint64{7, 9}, [2]uint64{u.Order(), u.Changed()})
	require.Same(t, &a.conn, a.Info().Connection, "the ConnectionInfo is the allocation's own")
	require.True(t, proto.Equal(p, u.Info()))
}
