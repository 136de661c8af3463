package agent

import (
	"fmt"
	"os"
)

// makeDataDir creates the data dir with mode 0700, or checks the one that
// exists: a data dir its group or others can write is refused, with the
// remedy. Whoever can write it could put their own API socket, state file
// or plugin socket in the agent's place.
func makeDataDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	info, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if mode := info.Mode().Perm(); mode&0o022 != 0 {
		return fmt.Errorf("%w: data dir %s has mode %04o: its group or others can write it, and could put their own API socket, "+
			"state file or plugin sockets in it; make it writable by its owner only (chmod go-w %s; the agent creates it 0700)",
			ErrInvalidConfig, dir, mode, dir)
	}
	return nil
}
