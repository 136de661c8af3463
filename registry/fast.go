package registry

import (
	"unsafe"

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
// on the common case: plain IDs, a plain socket path and no address or TLS
// settings, and options within their bounds.
func plainPlugin(p *messages.PluginInfo) bool {
	if p == nil || !plainID(p.GetType()) || !plainID(p.GetName()) || !plainID(p.GetAllocId()) ||
		len(p.GetVersion()) > MaxVersionLen || len(p.GetRegisteredBy()) > MaxVersionLen {
		return false
	}
	c := p.GetConnection()
	if c.GetAddress() != "" || c.GetTls() != nil || !plainSocketPath(c.GetSocketPath()) || len(p.GetOptions()) > MaxOptions {
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

// copyInto copies p into a's PluginInfo and ConnectionInfo, field by
// field, without protobuf's reflection (cloning by reflection was a
// twentieth of a writer's CPU). Every string goes into one block of
// memory of a's own, and the options, TLS settings and unknown fields
// into maps, messages and slices of a's own, so a keeps no reference to p
// or to anything p points to. Then p does not escape: a caller's
// PluginInfo, its ConnectionInfo and the strings it builds for them may
// live on its stack, and a name sliced out of a larger buffer does not
// keep that buffer alive in the registry.
// TestCopyPluginCopiesEveryField fails when a field is added to the
// messages and not here; TestCopyPluginKeepsNothingOfTheOriginal when a
// reference is kept.
func copyInto(a *allocation, p *messages.PluginInfo) {
	s := stringBlock{buf: make([]byte, 0, pluginStringBytes(p))}
	a.plugin.Type, a.plugin.Name, a.plugin.Version = s.copy(p.Type), s.copy(p.Name), s.copy(p.Version)
	a.plugin.AllocId, a.plugin.RegisteredBy = s.copy(p.AllocId), s.copy(p.RegisteredBy)
	if len(p.Options) > 0 {
		a.plugin.Options = make(map[string]string, len(p.Options))
		for k, v := range p.Options {
			a.plugin.Options[s.copy(k)] = s.copy(v)
		}
	}
	p.CopyUnknownFieldsTo(&a.plugin)
	c := p.Connection
	if c == nil {
		return
	}
	a.conn.SocketPath, a.conn.Address = s.copy(c.SocketPath), s.copy(c.Address)
	if t := c.Tls; t != nil {
		a.conn.Tls = &messages.TLSConfig{
			InsecureSkipVerify: t.InsecureSkipVerify,
			CaFile:             s.copy(t.CaFile), CertFile: s.copy(t.CertFile), KeyFile: s.copy(t.KeyFile),
		}
		t.CopyUnknownFieldsTo(a.conn.Tls)
	}
	c.CopyUnknownFieldsTo(&a.conn)
	a.plugin.Connection = &a.conn
}

// pluginStringBytes is the length of all of p's strings together.
func pluginStringBytes(p *messages.PluginInfo) int {
	if p == nil {
		return 0
	}
	n := len(p.Type) + len(p.Name) + len(p.Version) + len(p.AllocId) + len(p.RegisteredBy)
	for k, v := range p.Options {
		n += len(k) + len(v)
	}
	if c := p.Connection; c != nil {
		n += len(c.SocketPath) + len(c.Address)
		if t := c.Tls; t != nil {
			n += len(t.CaFile) + len(t.CertFile) + len(t.KeyFile)
		}
	}
	return n
}

// stringBlock copies strings into one buffer, made with room for all of
// them: one allocation for every string of a registration. Bytes once
// copied are never written again, so the strings made over them stay
// what they were copied from.
type stringBlock struct{ buf []byte }

// copy returns a copy of v in the block.
func (s *stringBlock) copy(v string) string {
	if v == "" {
		return ""
	}
	start := len(s.buf)
	s.buf = append(s.buf, v...)
	return unsafe.String(&s.buf[start], len(v))
}
