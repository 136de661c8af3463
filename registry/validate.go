package registry

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/names"
	"github.com/plugvisor/plugvisor/registry/internal/plain"
	"github.com/plugvisor/plugvisor/registry/internal/table"
)

// Limits on what the registry accepts.
const (
	// MaxIDLen bounds plugin types, names and alloc IDs, in bytes.
	MaxIDLen = names.MaxLen
	// MaxSocketPathLen is the size of sun_path less its terminating NUL.
	MaxSocketPathLen = names.MaxSocketPathLen
	// MaxVersionLen bounds a plugin's version string, in bytes.
	MaxVersionLen = 256
	// MaxOptions bounds the number of entries in a plugin's options.
	MaxOptions = 64
	// MaxOptionLen bounds each option key and value, in bytes.
	MaxOptionLen = 4096
	// MaxAddressLen bounds a connection's network address, in bytes.
	MaxAddressLen = 2048
	// MaxTLSPathLen bounds each file path of a connection's TLS settings,
	// in bytes (PATH_MAX less its terminating NUL).
	MaxTLSPathLen = 4095
)

// maxPluginBytes is the most bytes of strings a valid registration holds.
const maxPluginBytes = 3*MaxIDLen + 2*MaxVersionLen + MaxSocketPathLen + MaxAddressLen +
	3*MaxTLSPathLen + MaxOptions*2*MaxOptionLen

// Defaults of Limits.
const (
	// DefaultPluginsPerType bounds the allocations of one plugin type.
	DefaultPluginsPerType = 16384
	// DefaultOptionsBytes bounds one plugin's options, keys and values
	// together, in bytes.
	DefaultOptionsBytes = 16 << 10
	// DefaultSubscribers bounds the open channel subscriptions.
	DefaultSubscribers = 1024
)

// Limits bound what one registry holds, so that no client can grow the
// agent without bound. A zero field takes its default; a refusal is
// ErrLimit (the options' size: ErrInvalid), says which limit and how to
// raise it, and changes nothing.
type Limits struct {
	// PluginsPerType bounds the allocations (every registered copy of every
	// plugin) of one type (default DefaultPluginsPerType). Re-registering an
	// allocation that is already there is always accepted. A refusal
	// matches ErrLimit.
	PluginsPerType int
	// OptionsBytes bounds the total size of one plugin's options, every key
	// and value, in bytes (default DefaultOptionsBytes).
	OptionsBytes int
	// Subscribers bounds the channel subscriptions (Subscribe,
	// PluginsUpdatedCh; every API event stream is one) open at once
	// (default DefaultSubscribers). A refusal matches ErrLimit.
	Subscribers int
}

func (l Limits) withDefaults() Limits {
	if l.PluginsPerType <= 0 {
		l.PluginsPerType = DefaultPluginsPerType
	}
	if l.OptionsBytes <= 0 {
		l.OptionsBytes = DefaultOptionsBytes
	}
	if l.Subscribers <= 0 {
		l.Subscribers = DefaultSubscribers
	}
	return l
}

// slots counts what is open against a limit, from any goroutine.
type slots struct {
	open atomic.Int64
	max  int64
}

// acquire takes a slot, or reports that all are taken.
func (s *slots) acquire() bool {
	if s.open.Add(1) > s.max {
		s.open.Add(-1)
		return false
	}
	return true
}

// release gives a slot back.
func (s *slots) release() { s.open.Add(-1) }

// checkOptions refuses options over l.OptionsBytes.
func (l Limits) checkOptions(p *messages.PluginInfo) error {
	size := 0
	for k, v := range p.GetOptions() {
		size += len(k) + len(v)
	}
	if size > l.OptionsBytes {
		return errorf(ErrInvalid, "plugin %q: options are %d bytes, over the limit of %d "+
			"(registry.Limits.OptionsBytes, agent flag -max-plugin-options-bytes); send fewer or smaller options",
			p.GetName(), size, l.OptionsBytes)
	}
	return nil
}

// checkRoom refuses a new allocation of ptype once the type holds
// l.PluginsPerType of them.
func (l Limits) checkRoom(ptype string, allocations int) error {
	if allocations >= l.PluginsPerType {
		return errorf(ErrLimit, "plugin type %q holds %d allocations, the limit "+
			"(registry.Limits.PluginsPerType, agent flag -max-plugins-per-type); deregister old allocations or raise the limit",
			ptype, allocations)
	}
	return nil
}

// ValidatePlugin checks a registration from any source (the API, spec
// files, Go callers, the store at restore) and returns every problem at
// once, each matching ErrInvalid. A nil result means the registry accepts
// it. It does not look at the file system; see ValidateRegistration for
// what the API adds.
func ValidatePlugin(p *messages.PluginInfo) error {
	if p == nil {
		return errorf(ErrInvalid, "plugin info must not be empty")
	}
	problems := []error{
		ValidateID("plugin type", p.GetType()),
		ValidateID("plugin name", p.GetName()),
		ValidateID("alloc ID", p.GetAllocId()),
		validateVersion(p.GetVersion()),
		validateRegisteredBy(p.GetRegisteredBy()),
		validateConnection(p.GetConnection()),
		validateOptions(p.GetOptions()),
	}
	return errors.Join(problems...)
}

// validatePlugin is ValidatePlugin, quick for a plain plugin.
func validatePlugin(p *messages.PluginInfo) error {
	if plain.Plugin(p, plainBounds) {
		return nil
	}
	return ValidatePlugin(p)
}

// plainBounds are the limits a plain registration keeps, for the fast
// path's check.
var plainBounds = plain.Bounds{Version: MaxVersionLen, Options: MaxOptions, Option: MaxOptionLen}

// ValidateRegistration checks a registration that arrives through the API:
// ValidatePlugin's rules, and then a unix socket only (network addresses
// come from spec files, which discovery reads), which must be a socket if
// anything exists at its path yet. It reads the file system, so callers run
// it at the edge, off any actor.
func ValidateRegistration(p *messages.PluginInfo) error {
	if err := ValidatePlugin(p); err != nil {
		return err
	}
	c := p.GetConnection()
	if c.GetAddress() != "" {
		return errorf(ErrInvalid, "connection address %q: plugins registered through the API connect by unix socket only; "+
			"give socket_path, or put the address in a spec file in a watched directory", truncate(c.GetAddress()))
	}
	if err := names.CheckSocketFile("socket path", c.GetSocketPath()); err != nil {
		return errorf(ErrInvalid, "%w", err)
	}
	return nil
}

// ValidateID checks a type, name or ID that may become part of a path or a
// storage key with names.Check (present, at most MaxIDLen bytes, not "." or
// "..", no separators, NUL, control, bidirectional or zero-width
// characters). field names it in the error, which matches ErrInvalid.
func ValidateID(field, v string) error {
	if err := names.Check(field, v); err != nil {
		return errorf(ErrInvalid, "%w", err)
	}
	return nil
}

func validateVersion(v string) error {
	if len(v) > MaxVersionLen {
		return errorf(ErrInvalid, "plugin version is %d bytes, over the limit of %d", len(v), MaxVersionLen)
	}
	return nil
}

func validateRegisteredBy(v string) error {
	if len(v) > MaxVersionLen {
		return errorf(ErrInvalid, "registered_by is %d bytes, over the limit of %d", len(v), MaxVersionLen)
	}
	return nil
}

// ValidateSocketPath checks a unix socket path with names.CheckSocketPath:
// absolute, clean, short enough for sun_path (at most MaxSocketPathLen
// bytes), no NUL or invisible characters.
func ValidateSocketPath(path string) error {
	if err := names.CheckSocketPath("socket path", path); err != nil {
		return errorf(ErrInvalid, "%w", err)
	}
	return nil
}

func validateConnection(c *messages.ConnectionInfo) error {
	socket, addr := c.GetSocketPath(), c.GetAddress()
	switch {
	case socket == "" && addr == "":
		return errorf(ErrInvalid, "connection info must give a socket path or an address")
	case socket != "" && addr != "":
		return errorf(ErrInvalid, "connection info must give a socket path or an address, not both")
	case socket != "":
		return errors.Join(ValidateSocketPath(socket), validateTLS(c.GetTls()))
	}
	return errors.Join(validateAddress(addr), validateTLS(c.GetTls()))
}

func validateTLS(t *messages.TLSConfig) error {
	var problems []error
	for _, f := range []struct{ field, path string }{
		{"TLS ca_file", t.GetCaFile()}, {"TLS cert_file", t.GetCertFile()}, {"TLS key_file", t.GetKeyFile()},
	} {
		if len(f.path) > MaxTLSPathLen {
			problems = append(problems, errorf(ErrInvalid, "%s is %d bytes, over the limit of %d", f.field, len(f.path), MaxTLSPathLen))
		}
	}
	return errors.Join(problems...)
}

// validateAddress checks a network address as spec files give it: tcp://,
// http:// or https://, with a host, and a port unless the scheme implies one.
func validateAddress(addr string) error {
	if len(addr) > MaxAddressLen {
		return errorf(ErrInvalid, "address %q is %d bytes, over the limit of %d", truncate(addr), len(addr), MaxAddressLen)
	}
	u, err := url.Parse(addr)
	if err != nil {
		return errorf(ErrInvalid, "address %q: %w", addr, err)
	}
	switch u.Scheme {
	case "tcp", "http", "https":
	default:
		return errorf(ErrInvalid, "address %q: scheme must be tcp, http or https", addr)
	}
	if u.Opaque != "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/") {
		return errorf(ErrInvalid, "address %q must be scheme://host[:port] with no path, user, query or fragment", addr)
	}
	if u.Hostname() == "" || (u.Scheme == "tcp" && u.Port() == "") {
		return errorf(ErrInvalid, "address %q must be tcp://host:port (or http[s]://host[:port])", addr)
	}
	return nil
}

func validateOptions(opts map[string]string) error {
	if err := checkOptionCount(len(opts)); err != nil {
		return err
	}
	for k, v := range opts {
		if k == "" || len(k) > MaxOptionLen || len(v) > MaxOptionLen {
			return errorf(ErrInvalid, "option %q: keys must be 1 to %d bytes and values at most %d",
				truncate(k), MaxOptionLen, MaxOptionLen)
		}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 32 {
		return fmt.Sprintf("%s…", s[:32])
	}
	return s
}

func checkOptionCount(n int) error {
	if n > MaxOptions {
		return errorf(ErrInvalid, "%d options, over the limit of %d", n, MaxOptions)
	}
	return nil
}

// checkCopySize refuses, before the registry copies it, a registration
// larger than any valid one: copyInto makes room for all of a
// registration's strings and options at once, and an embedder's mistake
// must get ErrInvalid, not an allocation that size. It reads only
// lengths, so p does not escape.
func checkCopySize(p *messages.PluginInfo) error {
	if err := checkOptionCount(len(p.GetOptions())); err != nil {
		return err
	}
	if n := table.StringBytes(p); n > maxPluginBytes {
		return errorf(ErrInvalid, "plugin info holds %d bytes of strings, more than a valid registration can (%d); "+
			"over its limit: %s", n, maxPluginBytes, oversizeFields(p))
	}
	return nil
}

// oversizeFields names the fields of p longer than their limits, judged
// on lengths alone, so p does not escape.
func oversizeFields(p *messages.PluginInfo) string {
	c, t := p.GetConnection(), p.GetConnection().GetTls()
	optionsOver := false
	for k, v := range p.GetOptions() {
		optionsOver = optionsOver || len(k) > MaxOptionLen || len(v) > MaxOptionLen
	}
	var over []string
	for _, f := range []struct {
		field     string
		len, most int
	}{
		{"type", len(p.GetType()), MaxIDLen}, {"name", len(p.GetName()), MaxIDLen}, {"alloc ID", len(p.GetAllocId()), MaxIDLen},
		{"version", len(p.GetVersion()), MaxVersionLen}, {"registered_by", len(p.GetRegisteredBy()), MaxVersionLen},
		{"socket path", len(c.GetSocketPath()), MaxSocketPathLen}, {"address", len(c.GetAddress()), MaxAddressLen},
		{"TLS ca_file", len(t.GetCaFile()), MaxTLSPathLen}, {"TLS cert_file", len(t.GetCertFile()), MaxTLSPathLen},
		{"TLS key_file", len(t.GetKeyFile()), MaxTLSPathLen},
	} {
		if f.len > f.most {
			over = append(over, fmt.Sprintf("%s (%d bytes, at most %d)", f.field, f.len, f.most))
		}
	}
	if optionsOver {
		over = append(over, fmt.Sprintf("options (keys and values at most %d bytes each)", MaxOptionLen))
	}
	return strings.Join(over, ", ")
}
