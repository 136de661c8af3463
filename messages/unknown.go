package messages

// HasUnknownFields reports whether x carries fields this build does not
// know (sent by a newer peer): len(x.ProtoReflect().GetUnknown()) > 0,
// without protobuf's reflection. The registry asks it of every
// registration it copies.
func (x *PluginInfo) HasUnknownFields() bool { return x != nil && len(x.unknownFields) > 0 }

// HasUnknownFields is PluginInfo.HasUnknownFields for a ConnectionInfo.
func (x *ConnectionInfo) HasUnknownFields() bool { return x != nil && len(x.unknownFields) > 0 }
