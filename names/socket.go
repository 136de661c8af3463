package names

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// ErrNotSocket is matched by CheckSocketFile's error when something other
// than a unix socket sits at the path.
var ErrNotSocket = errors.New("names: not a unix socket")

// CheckSocketFile checks path with CheckSocketPath, then refuses it when
// something that is not a unix socket exists there (a regular file, a
// directory, a device). A path where nothing exists yet is accepted: a
// plugin may register before its socket is up. Symbolic links are followed,
// as a dial would.
func CheckSocketFile(field, path string) error {
	if err := CheckSocketPath(field, path); err != nil {
		return err
	}
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("%w: %s %s cannot be checked: %v", ErrInvalid, field, quote(path), err)
	case info.Mode().Type()&fs.ModeSocket == 0:
		return fmt.Errorf("%w: %w: %s %s is %s, not a socket; give the path of the plugin's unix socket",
			ErrInvalid, ErrNotSocket, field, quote(path), DescribeMode(info.Mode()))
	}
	return nil
}

// DescribeMode names the type of a file, with its article ("a directory"),
// for error messages.
func DescribeMode(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return fmt.Sprintf("a file of mode %v", m.Type())
}
