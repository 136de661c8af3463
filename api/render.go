package api

import (
	"encoding/json"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// This file renders protobuf messages as the API's JSON, by the rules every
// response follows (protojson's own rules differ on each):
//   - every field is present under its proto (snake_case) name, in the
//     proto's order; booleans, numbers and strings even when zero;
//   - 64-bit integers are JSON numbers, not strings;
//   - repeated fields are [] when empty, maps {};
//   - an unset message field is absent, and so is an unset time;
//   - a time is RFC 3339 in UTC, a duration Go's text ("1.5s");
//   - an enum is its value's name without the enum's prefix, in lower
//     case: DISCOVERED_PLUGIN_STATE_REGISTERED is "registered".

// protoJSON is m rendered as JSON; null for a nil message.
func protoJSON(m proto.Message) json.RawMessage {
	b, err := json.Marshal(render(m))
	if err != nil {
		return json.RawMessage(`null`)
	}
	return b
}

// protoList renders every item; an empty list is [].
func protoList[M proto.Message](items []M) []json.RawMessage {
	out := make([]json.RawMessage, 0, len(items))
	for _, m := range items {
		out = append(out, protoJSON(m))
	}
	return out
}

// render is m as a tree of JSON values; nil for a nil message.
func render(m proto.Message) any {
	if m == nil || !m.ProtoReflect().IsValid() {
		return nil
	}
	return renderMessage(m.ProtoReflect())
}

func renderMessage(m protoreflect.Message) any {
	switch v := m.Interface().(type) {
	case *timestamppb.Timestamp:
		return v.AsTime().UTC().Format(time.RFC3339Nano)
	case *durationpb.Duration:
		return v.AsDuration().String()
	}
	var out object
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.Kind() == protoreflect.MessageKind && fd.Cardinality() != protoreflect.Repeated && !m.Has(fd) {
			continue
		}
		out = append(out, member{string(fd.Name()), renderField(fd, m.Get(fd))})
	}
	return out
}

// object is a JSON object whose members keep their order.
type object []member

type member struct {
	name  string
	value any
}

// MarshalJSON writes the members in order; no members is {}.
func (o object) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for i, m := range o {
		if i > 0 {
			b = append(b, ',')
		}
		name, err := json.Marshal(m.name)
		if err != nil {
			return nil, err
		}
		value, err := json.Marshal(m.value)
		if err != nil {
			return nil, err
		}
		b = append(append(append(b, name...), ':'), value...)
	}
	return append(b, '}'), nil
}

func renderField(fd protoreflect.FieldDescriptor, v protoreflect.Value) any {
	switch {
	case fd.IsList():
		list := v.List()
		out := make([]any, 0, list.Len())
		for i := range list.Len() {
			out = append(out, renderValue(fd, list.Get(i)))
		}
		return out
	case fd.IsMap():
		out := map[string]any{}
		v.Map().Range(func(k protoreflect.MapKey, item protoreflect.Value) bool {
			out[k.String()] = renderValue(fd.MapValue(), item)
			return true
		})
		return out
	}
	return renderValue(fd, v)
}

func renderValue(fd protoreflect.FieldDescriptor, v protoreflect.Value) any {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return renderMessage(v.Message())
	case protoreflect.EnumKind:
		return enumName(fd.Enum(), v.Enum())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return v.Int()
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return v.Uint()
	}
	return v.Interface() // bool, float, string, bytes (base64)
}

// enumName is n's value name without the enum's prefix, in lower case; an
// unknown number stays a number.
func enumName(e protoreflect.EnumDescriptor, n protoreflect.EnumNumber) any {
	value := e.Values().ByNumber(n)
	if value == nil {
		return int32(n)
	}
	return strings.ToLower(strings.TrimPrefix(string(value.Name()), upperSnake(string(e.Name()))+"_"))
}

// upperSnake turns "DiscoveredPluginState" into "DISCOVERED_PLUGIN_STATE".
func upperSnake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}
