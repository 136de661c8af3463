package messages_test

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/messages"
)

// TestCopyUnknownFieldsToCopiesWhatReflectionHolds: a field number the
// messages do not define is kept as unknown; CopyUnknownFieldsTo gives the
// target the same bytes, in memory of its own, and clears the target's
// when the source has none (or is nil).
func TestCopyUnknownFieldsToCopiesWhatReflectionHolds(t *testing.T) {
	unknown := protowire.AppendTag(nil, 99, protowire.BytesType)
	unknown = protowire.AppendString(unknown, "from a newer peer")

	for name, pair := range map[string][3]proto.Message{
		"PluginInfo":     {&messages.PluginInfo{}, &messages.PluginInfo{}, (*messages.PluginInfo)(nil)},
		"ConnectionInfo": {&messages.ConnectionInfo{}, &messages.ConnectionInfo{}, (*messages.ConnectionInfo)(nil)},
		"TLSConfig":      {&messages.TLSConfig{}, &messages.TLSConfig{}, (*messages.TLSConfig)(nil)},
	} {
		from, to, none := pair[0], pair[1], pair[2]
		if err := proto.Unmarshal(unknown, from); err != nil {
			t.Fatal(err)
		}
		copyUnknown(from, to)
		got, want := to.ProtoReflect().GetUnknown(), from.ProtoReflect().GetUnknown()
		if !bytes.Equal(got, want) || len(got) == 0 {
			t.Fatalf("%s: copied unknown fields %x, want %x", name, got, want)
		}
		got[len(got)-1] ^= 0xff
		if bytes.Equal(got, from.ProtoReflect().GetUnknown()) {
			t.Fatalf("%s: the copy shares the original's bytes", name)
		}
		copyUnknown(none, to)
		if n := len(to.ProtoReflect().GetUnknown()); n != 0 {
			t.Fatalf("%s: a copy from nil left %d bytes of unknown fields", name, n)
		}
	}
}

// copyUnknown calls from's CopyUnknownFieldsTo, from and to being of one
// type.
func copyUnknown(from, to proto.Message) {
	switch f := from.(type) {
	case *messages.PluginInfo:
		f.CopyUnknownFieldsTo(to.(*messages.PluginInfo))
	case *messages.ConnectionInfo:
		f.CopyUnknownFieldsTo(to.(*messages.ConnectionInfo))
	case *messages.TLSConfig:
		f.CopyUnknownFieldsTo(to.(*messages.TLSConfig))
	}
}
