// Package testbin builds the plugvisor binary for the tests that run it as
// processes (cmd/plugvisor's end-to-end tests, internal/chaos), with the
// race detector when the tests have it.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Build builds the package pkg (an import path, or "." for the package
// the test runs in) as an executable named plugvisor in a new temporary
// directory, with -race when race is set. It returns the binary's path
// and a function that removes the directory.
func Build(pkg string, race bool) (string, func(), error) {
	dir, err := os.MkdirTemp("", "pvbin")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	binary := filepath.Join(dir, "plugvisor")
	args := []string{"build", "-o", binary}
	if race {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, pkg)...).CombinedOutput(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("building %s: %w\n%s", pkg, err, out)
	}
	return binary, cleanup, nil
}
