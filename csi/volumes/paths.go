package volumes

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/plugvisor/plugvisor/names"
)

// Directory names under a node plugin's directory in the volume manager's root.
const (
	// StagingDirName holds the staging paths, one per volume:
	// <root>/<plugin>/staging/<namespace>/<volume ID>.
	StagingDirName = "staging"
	// PerAllocDirName holds the target paths, one per alloc and volume:
	// <root>/<plugin>/per-alloc/<alloc ID>/<namespace>/<volume ID>.
	PerAllocDirName = "per-alloc"
)

// checkID says what is wrong with v as one path segment and storage key
// part: names.Check's rules, and not "."; nil when v is fine. field names
// it.
func checkID(field, v string) error {
	if err := names.Check(field, v); err != nil {
		return err
	}
	if v == "." {
		return fmt.Errorf("%s must not be %q", field, v)
	}
	return nil
}

// checkIDs checks pairs of (field, value) and returns one ErrInvalid error
// naming every problem (and wrapping each, a *names.Error most), or nil.
func checkIDs(pairs ...string) error {
	var problems []error
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := checkID(pairs[i], pairs[i+1]); err != nil {
			problems = append(problems, err)
		}
	}
	if len(problems) == 0 {
		return nil
	}
	format := "%w: %w" + strings.Repeat("; %w", len(problems)-1)
	return fmt.Errorf(format, append([]any{ErrInvalid}, errorsAsAny(problems)...)...)
}

func errorsAsAny(errs []error) []any {
	out := make([]any, len(errs))
	for i, err := range errs {
		out[i] = err
	}
	return out
}

// paths lays out the directories under the volume manager's root.
type paths struct {
	root string
}

// staging is where the volume is staged: once per volume on the node.
func (p paths) staging(plugin, namespace, id string) string {
	return filepath.Join(p.root, plugin, StagingDirName, namespace, id)
}

// target is where the volume is published for alloc.
func (p paths) target(plugin, alloc, namespace, id string) string {
	return filepath.Join(p.root, plugin, PerAllocDirName, alloc, namespace, id)
}

// removeAllocDirs removes an idle alloc's directories to the layout's
// depth (per-alloc/<alloc>/<namespace>/<volume>), the deepest first: the
// empty targets a plugin left, then the empty namespace directories, then
// the alloc's. It reads only those directories, never a target's contents,
// and rmdir removes neither a mount point nor a directory with anything in
// it: those stay, and so do their parents.
func removeAllocDirs(allocDir string) error {
	var errs []error
	for _, ns := range subdirs(allocDir) {
		nsDir := filepath.Join(allocDir, ns)
		for _, target := range subdirs(nsDir) {
			if _, err := removeEmpty(filepath.Join(nsDir, target)); err != nil {
				errs = append(errs, err)
			}
		}
		if _, err := removeEmpty(nsDir); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := removeEmpty(allocDir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// mkdirPrivate creates dir and its parents, readable by the agent only.
func mkdirPrivate(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create directory: %w", err)
	}
	return nil
}

// removeEmpty removes the directory dir when it is empty and no mount
// point. gone says dir is not there any more (removed, or it was not);
// a directory that stays, not empty or a mount point, is no error.
func removeEmpty(dir string) (gone bool, err error) {
	err = syscall.Rmdir(dir)
	switch {
	case err == nil, errors.Is(err, os.ErrNotExist):
		return true, nil
	case errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EEXIST), errors.Is(err, syscall.EBUSY):
		return false, nil
	}
	return false, fmt.Errorf("remove %s: %w", dir, err)
}
