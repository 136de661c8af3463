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
		return fmt.Errorf("%w: %w: %s %s is a %s, not a socket; give the path of the plugin's unix socket",
			ErrInvalid, ErrNotSocket, field, quote(path), describe(info.Mode()))
	}
	return nil
}

func describe(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m.IsRegular():
		return "regular file"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	}
	return "file of mode " + m.String()
}
