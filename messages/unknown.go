package messages

import "bytes"

// CopyUnknownFieldsTo sets to's unknown fields (those a newer peer sent
// and this build does not know) to a copy of x's, keeping no reference to
// x's: for copying a PluginInfo by hand, field by field, without
// protobuf's reflection, which would make x escape to the heap. A nil x
// has none.
func (x *PluginInfo) CopyUnknownFieldsTo(to *PluginInfo) {
	to.unknownFields = nil
	if x != nil && len(x.unknownFields) > 0 {
		to.unknownFields = bytes.Clone(x.unknownFields)
	}
}

// CopyUnknownFieldsTo is PluginInfo.CopyUnknownFieldsTo for a
// ConnectionInfo.
func (x *ConnectionInfo) CopyUnknownFieldsTo(to *ConnectionInfo) {
	to.unknownFields = nil
	if x != nil && len(x.unknownFields) > 0 {
		to.unknownFields = bytes.Clone(x.unknownFields)
	}
}

// CopyUnknownFieldsTo is PluginInfo.CopyUnknownFieldsTo for a TLSConfig.
func (x *TLSConfig) CopyUnknownFieldsTo(to *TLSConfig) {
	to.unknownFields = nil
	if x != nil && len(x.unknownFields) > 0 {
		to.unknownFields = bytes.Clone(x.unknownFields)
	}
}
