package registry

import (
	"maps"

	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/messages"
)

// The common registration is plain ASCII: a type, a name and an alloc ID of
// letters, digits and punctuation, and a clean absolute socket path. The
// functions below recognise it in one pass over the bytes, without the
// rune decoding and Unicode tables of the full checks (ValidatePlugin,
// names.Check), which were a tenth of a writer's CPU. They only ever say
// "certainly valid": anything else goes to the full checks, which decide
// and say why.

// plainID reports whether v is an ID that names.Check accepts, judged on
// printable ASCII alone: 1 to MaxIDLen bytes, no path separator, no "..",
// not ".".
func plainID(v string) bool {
	if v == "" || len(v) > MaxIDLen || v == "." {
		return false
	}
	prev := byte(0)
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < 0x20 || c > 0x7e || c == '/' || c == '\\' || (c == '.' && prev == '.') {
			return false
		}
		prev = c
	}
	return true
}

// plainSocketPath reports whether path is a socket path that
// names.CheckSocketPath accepts, judged on printable ASCII alone: absolute,
// at most MaxSocketPathLen bytes, and clean (no empty, "." or ".."
// element, no trailing slash).
func plainSocketPath(path string) bool {
	if len(path) < 2 || len(path) > MaxSocketPathLen || path[0] != '/' {
		return false
	}
	start := 1 // of the current element
	for i := 1; i <= len(path); i++ {
		if i < len(path) {
			c := path[i]
			if c < 0x20 || c > 0x7e {
				return false
			}
			if c != '/' {
				continue
			}
		}
		switch path[start:i] {
		case "", ".", "..":
			return false
		}
		start = i + 1
	}
	return true
}

// plainPlugin reports whether ValidatePlugin certainly accepts p, judged
// on the common case: plain IDs, a plain socket path and no address, and
// options within their bounds.
func plainPlugin(p *messages.PluginInfo) bool {
	if p == nil || !plainID(p.GetType()) || !plainID(p.GetName()) || !plainID(p.GetAllocId()) ||
		len(p.GetVersion()) > MaxVersionLen || len(p.GetRegisteredBy()) > MaxVersionLen {
		return false
	}
	c := p.GetConnection()
	if c.GetAddress() != "" || !plainSocketPath(c.GetSocketPath()) || len(p.GetOptions()) > MaxOptions {
		return false
	}
	for k, v := range p.GetOptions() {
		if k == "" || len(k) > MaxOptionLen || len(v) > MaxOptionLen {
			return false
		}
	}
	return true
}

// validatePlugin is ValidatePlugin, quick for a plain plugin.
func validatePlugin(p *messages.PluginInfo) error {
	if plainPlugin(p) {
		return nil
	}
	return ValidatePlugin(p)
}

// copyPlugin copies p into a new allocation, for the registry to keep
// (its order is the actor's to set), or nil for nil: see copyInto.
func copyPlugin(p *messages.PluginInfo) *allocation {
	if p == nil {
		return nil
	}
	a := &allocation{}
	copyInto(a, p)
	return a
}

// copyInto is proto.Clone(p) into a's PluginInfo and ConnectionInfo, for
// the fields a PluginInfo has, without protobuf's reflection: the
// registry keeps a copy of every registration, and cloning by reflection
// was a twentieth of a writer's CPU. A message with unknown fields, or a
// TLS config, is merged into a by protobuf instead (its ConnectionInfo
// then has a heap object of its own).
// TestCopyPluginCopiesEveryField fails when a field is added to the
// messages and not here.
func copyInto(a *allocation, p *messages.PluginInfo) {
	if p.HasUnknownFields() || p.Connection != nil && (p.Connection.Tls != nil || p.Connection.HasUnknownFields()) {
		proto.Merge(&a.plugin, p)
		return
	}
	a.plugin.Type, a.plugin.Name, a.plugin.Version = p.Type, p.Name, p.Version
	a.plugin.AllocId, a.plugin.RegisteredBy = p.AllocId, p.RegisteredBy
	if len(p.Options) > 0 {
		a.plugin.Options = maps.Clone(p.Options)
	}
	if c := p.Connection; c != nil {
		a.conn.SocketPath, a.conn.Address = c.SocketPath, c.Address
		a.plugin.Connection = &a.conn
	}
}
