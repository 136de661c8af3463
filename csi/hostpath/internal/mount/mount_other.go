//go:build !linux

package mount

// Bind returns ErrUnsupported outside Linux.
func Bind(source, target string, readonly bool) error { return ErrUnsupported }

// Unmount returns ErrUnsupported outside Linux.
func Unmount(target string) error { return ErrUnsupported }

// Detach returns ErrUnsupported outside Linux.
func Detach(target string) error { return ErrUnsupported }

// isMountRoot leaves the answer to the mount table outside Linux.
func isMountRoot(string) (root, known bool, err error) { return false, false, nil }
