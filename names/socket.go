package names

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/plugvisor/plugvisor/errclass"
)

// ErrNotSocket is matched by CheckSocketFile's error when something other
// than a unix socket sits at the path.
var ErrNotSocket = errclass.New(errclass.Invalid, "not a unix socket")

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
		var pathErr *fs.PathError
		if errors.As(err, &pathErr) {
			err = pathErr.Err
		}
		return &Error{Field: field, Value: path, Reason: "cannot be checked: " + err.Error()}
	case info.Mode().Type()&fs.ModeSocket == 0:
		return &Error{Field: field, Value: path, kind: ErrNotSocket,
			Reason: "is " + DescribeMode(info.Mode()) + ", not a socket; give the path of the plugin's unix socket"}
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
