package messages_test

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/messages"
)

// TestHasUnknownFieldsSaysWhatReflectionSays: a field number the messages
// do not define is kept as unknown, and HasUnknownFields says so exactly
// when ProtoReflect().GetUnknown() holds it.
func TestHasUnknownFieldsSaysWhatReflectionSays(t *testing.T) {
	unknown := protowire.AppendTag(nil, 99, protowire.BytesType)
	unknown = protowire.AppendString(unknown, "from a newer peer")

	conn := &messages.ConnectionInfo{SocketPath: "/run/p.sock"}
	info := &messages.PluginInfo{Type: "csi-node", Name: "p", AllocId: "a", Connection: conn}
	if info.HasUnknownFields() || conn.HasUnknownFields() {
		t.Fatal("a message built here has no unknown fields")
	}
	var none *messages.PluginInfo
	if none.HasUnknownFields() {
		t.Fatal("a nil message has no unknown fields")
	}

	for name, m := range map[string]interface {
		proto.Message
		HasUnknownFields() bool
	}{"PluginInfo": &messages.PluginInfo{}, "ConnectionInfo": &messages.ConnectionInfo{}} {
		if err := proto.Unmarshal(unknown, m); err != nil {
			t.Fatal(err)
		}
		if !m.HasUnknownFields() || len(m.ProtoReflect().GetUnknown()) == 0 {
			t.Fatalf("%s: HasUnknownFields %v, reflection holds %d bytes; want both to say unknown", name, m.HasUnknownFields(), len(m.ProtoReflect().GetUnknown()))
		}
	}
}
