//go:build !linux

package mount

// Bind returns ErrUnsupported outside Linux.
func Bind(source, target string, readonly bool) error { return ErrUnsupported }

// Unmount returns ErrUnsupported outside Linux.
func Unmount(target string) error { return ErrUnsupported }

// Detach returns ErrUnsupported outside Linux.
func Detach(target string) error { return ErrUnsupported }
