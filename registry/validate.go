package registry

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"unicode"

	"github.com/plugvisor/plugvisor/messages"
)

// Limits on what the registry accepts.
const (
	// MaxIDLen bounds plugin types, names and alloc IDs, in bytes.
	MaxIDLen = 128
	// MaxSocketPathLen is the size of sun_path less its terminating NUL.
	MaxSocketPathLen = 107
	// MaxVersionLen bounds a plugin's version string, in bytes.
	MaxVersionLen = 256
	// MaxOptions bounds the number of entries in a plugin's options.
	MaxOptions = 64
	// MaxOptionLen bounds each option key and value, in bytes.
	MaxOptionLen = 4096
)

// ValidatePlugin checks a registration and returns every problem at once,
// each matching ErrInvalid. A nil result means the registry accepts it.
func ValidatePlugin(p *messages.PluginInfo) error {
	if p == nil {
		return errorf(ErrInvalid, "plugin info must not be empty")
	}
	problems := []error{
		ValidateID("plugin type", p.GetType()),
		ValidateID("plugin name", p.GetName()),
		ValidateID("alloc ID", p.GetAllocId()),
		validateVersion(p.GetVersion()),
		validateConnection(p.GetConnection()),
		validateOptions(p.GetOptions()),
	}
	return errors.Join(problems...)
}

// ValidateID checks a type, name or ID that may become part of a path or
// a storage key: present, at most MaxIDLen bytes, no path separators, no
// "..", no control characters. field names it in the error.
func ValidateID(field, v string) error {
	switch {
	case v == "":
		return errorf(ErrInvalid, "%s must not be empty", field)
	case len(v) > MaxIDLen:
		return errorf(ErrInvalid, "%s is %d bytes, over the limit of %d", field, len(v), MaxIDLen)
	case strings.ContainsAny(v, `/\`):
		return errorf(ErrInvalid, "%s %q must not contain a path separator", field, v)
	case strings.Contains(v, ".."):
		return errorf(ErrInvalid, "%s %q must not contain \"..\"", field, v)
	case strings.IndexFunc(v, unicode.IsControl) >= 0:
		return errorf(ErrInvalid, "%s %q must not contain control characters", field, v)
	}
	return nil
}

func validateVersion(v string) error {
	if len(v) > MaxVersionLen {
		return errorf(ErrInvalid, "plugin version is %d bytes, over the limit of %d", len(v), MaxVersionLen)
	}
	return nil
}

// ValidateSocketPath checks a unix socket path: absolute, clean, and short
// enough for sun_path (at most MaxSocketPathLen bytes).
func ValidateSocketPath(path string) error {
	switch {
	case !filepath.IsAbs(path):
		return errorf(ErrInvalid, "socket path %q must be absolute", path)
	case filepath.Clean(path) != path:
		return errorf(ErrInvalid, "socket path %q must be clean (no \"..\", \".\" or repeated slashes)", path)
	case len(path) > MaxSocketPathLen:
		return errorf(ErrInvalid, "socket path is %d bytes, over the unix limit of %d: %q", len(path), MaxSocketPathLen, path)
	case strings.ContainsRune(path, 0):
		return errorf(ErrInvalid, "socket path %q must not contain NUL", path)
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
		return ValidateSocketPath(socket)
	}
	return validateAddress(addr)
}

func validateAddress(addr string) error {
	u, err := url.Parse(addr)
	if err != nil {
		return errorf(ErrInvalid, "address %q: %v", addr, err)
	}
	if u.Scheme != "tcp" {
		return errorf(ErrInvalid, "address %q: scheme must be tcp", addr)
	}
	if _, port, err := net.SplitHostPort(u.Host); err != nil || u.Hostname() == "" || port == "" {
		return errorf(ErrInvalid, "address %q must be tcp://host:port", addr)
	}
	return nil
}

func validateOptions(opts map[string]string) error {
	if len(opts) > MaxOptions {
		return errorf(ErrInvalid, "%d options, over the limit of %d", len(opts), MaxOptions)
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
