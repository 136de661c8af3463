package table

import (
	"unsafe"

	"github.com/plugvisor/plugvisor/messages"
)

// Copy copies p into a new Allocation for the registry to keep, or returns
// nil for nil. Its order is the registry actor's to set (SetOrder). Copy
// keeps no reference to p: see copyInto.
func Copy(p *messages.PluginInfo) *Allocation {
	if p == nil {
		return nil
	}
	a := &Allocation{}
	copyInto(a, p)
	return a
}

// copyInto copies p into a's PluginInfo and ConnectionInfo, field by
// field. It does not use protobuf's reflection: cloning by reflection was
// a twentieth of a writer's CPU.
//
// Every string goes into one block of memory of a's own. The options, TLS
// settings and unknown fields go into maps, messages and slices of a's
// own. So a keeps no reference to p or to anything p points to, and p
// does not escape. A caller's PluginInfo, its ConnectionInfo and the
// strings it builds for them may live on its stack. A name sliced out of a
// larger buffer does not keep that buffer alive in the registry.
//
// TestCopyPluginCopiesEveryField fails when a field is added to the
// messages and not here. TestCopyPluginKeepsNothingOfTheOriginal fails
// when a reference is kept.
func copyInto(a *Allocation, p *messages.PluginInfo) {
	s := stringBlock{buf: make([]byte, 0, StringBytes(p))}
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

// StringBytes is the length of all of p's strings together: the size of
// the block that Copy makes for them.
func StringBytes(p *messages.PluginInfo) int {
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
