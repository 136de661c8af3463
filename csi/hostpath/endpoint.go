package hostpath

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/plugvisor/plugvisor/errclass"
)

// MaxSocketPathLength is the longest unix socket path the kernel accepts:
// sun_path holds 108 bytes including the terminating NUL.
const MaxSocketPathLength = 107

// ErrInvalidEndpoint is wrapped by every error ParseEndpoint returns.
var ErrInvalidEndpoint = errclass.New(errclass.Invalid, "invalid endpoint")

// ParseEndpoint returns the socket path of a unix socket endpoint, given as
// a path or as a unix:// (or unix:) URL. The path must be absolute and at
// most MaxSocketPathLength bytes.
func ParseEndpoint(endpoint string) (string, error) {
	path := endpoint
	for _, scheme := range []string{"unix://", "unix:"} {
		if rest, ok := strings.CutPrefix(path, scheme); ok {
			path = rest
			break
		}
	}
	switch {
	case path == "":
		return "", fmt.Errorf("%w: the unix socket path must not be empty", ErrInvalidEndpoint)
	case !filepath.IsAbs(path):
		return "", fmt.Errorf("%w: unix socket path %q must be absolute", ErrInvalidEndpoint, path)
	case len(path) > MaxSocketPathLength:
		return "", fmt.Errorf("%w: unix socket path %q is %d bytes, longer than the %d a unix socket allows", ErrInvalidEndpoint, path, len(path), MaxSocketPathLength)
	}
	return filepath.Clean(path), nil
}

// Listen listens on the unix socket endpoint (see ParseEndpoint), creating
// its directory if needed. A stale socket file that nothing answers on is
// removed first; a socket another process serves, or a file that is not a
// socket, is an error.
func (d *Driver) Listen(endpoint string) (net.Listener, error) {
	path, err := ParseEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	if err := d.removeStaleSocket(path); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("create socket directory: %w", err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	return l, nil
}

// removeStaleSocket removes the socket at path if no process answers on it.
func (d *Driver) removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("inspect socket path: %w", err)
	case fi.Mode().Type() != fs.ModeSocket:
		return fmt.Errorf("socket path %s exists and is not a socket", path)
	}
	if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
		_ = conn.Close()
		return fmt.Errorf("socket %s is in use by another process", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove stale socket: %w", err)
	}
	d.log.Info("hostpath: removed stale socket", "path", path)
	return nil
}
