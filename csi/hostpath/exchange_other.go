//go:build !linux

package hostpath

import "errors"

// exchange is not supported outside Linux: writeJSON renames instead.
func exchange(a, b string) error { return errors.ErrUnsupported }
