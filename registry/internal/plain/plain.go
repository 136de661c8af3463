// Package plain is the registry's fast path for the common registration.
//
// The common registration is plain ASCII: a type, a name and an alloc ID of
// letters, digits and punctuation, and a clean absolute socket path. The
// functions here recognise it in one pass over the bytes. They skip the
// rune decoding and Unicode tables of the full checks (registry's
// ValidatePlugin and names.Check), which were a tenth of a writer's CPU.
//
// They only ever say "certainly valid". Anything else goes to the full
// checks, which decide and say why.
package plain

import (
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/names"
)

// ID reports whether v is an ID that names.Check accepts, judged on
// printable ASCII alone: 1 to names.MaxLen bytes, no path separator, no
// "..", not ".".
func ID(v string) bool {
	if v == "" || len(v) > names.MaxLen || v == "." {
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

// SocketPath reports whether path is a socket path that
// names.CheckSocketPath accepts, judged on printable ASCII alone. The path
// is absolute and at most names.MaxSocketPathLen bytes. It is clean: no
// empty, "." or ".." element, and no trailing slash.
func SocketPath(path string) bool {
	if len(path) < 2 || len(path) > names.MaxSocketPathLen || path[0] != '/' {
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

// Bounds are the registry's limits on a registration's version, options
// and option keys and values, in bytes and entries.
type Bounds struct {
	Version int // the version and registered_by, each
	Options int // the number of options
	Option  int // each option key and value
}

// Plugin reports whether the registry's full check certainly accepts p.
// It is judged on the common case: plain IDs, a plain socket path, no
// address or TLS settings, and options within b.
func Plugin(p *messages.PluginInfo, b Bounds) bool {
	if p == nil || !ID(p.GetType()) || !ID(p.GetName()) || !ID(p.GetAllocId()) ||
		len(p.GetVersion()) > b.Version || len(p.GetRegisteredBy()) > b.Version {
		return false
	}
	c := p.GetConnection()
	if c.GetAddress() != "" || c.GetTls() != nil || !SocketPath(c.GetSocketPath()) || len(p.GetOptions()) > b.Options {
		return false
	}
	for k, v := range p.GetOptions() {
		if k == "" || len(k) > b.Option || len(v) > b.Option {
			return false
		}
	}
	return true
}
