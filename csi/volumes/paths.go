package volumes

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

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

// removeEmptyTree removes the empty directories at and below dir, the
// deepest first, so that dir goes too once nothing else is in it. It goes
// into no mount point, and rmdir removes neither a mount point nor a
// directory with anything in it: those stay, and so do their parents.
// Where the kernel cannot say which directories are mount points (statx
// before Linux 5.8), only dir itself goes, when empty.
func removeEmptyTree(dir string) error {
	switch mounted, known := mountRoot(dir); {
	case mounted:
		return nil
	case !known:
		_, err := removeEmpty(dir)
		return err
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("volumes: read %s: %w", dir, err)
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeEmptyTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	_, err = removeEmpty(dir)
	return err
}

// mountRoot reports whether dir is a mount point; known is false where
// the kernel does not say (statx before Linux 5.8) or dir cannot be asked.
func mountRoot(dir string) (mounted, known bool) {
	var st unix.Statx_t
	if unix.Statx(unix.AT_FDCWD, dir, unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT, 0, &st) != nil {
		return false, false
	}
	known = st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0
	return known && st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, known
}

// mkdirPrivate creates dir and its parents, readable by the agent only.
func mkdirPrivate(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("volumes: create directory: %w", err)
	}
	return nil
}

// removeEmpty removes the directory dir when it is empty and no mount
// point. gone says dir is not there any more (removed, or it was not);
// a directory that stays, not empty or a mount point, is no error.
func removeEmpty(dir string) (gone bool, err error) {
	err = os.Remove(dir)
	switch {
	case err == nil, errors.Is(err, os.ErrNotExist):
		return true, nil
	case errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EEXIST), errors.Is(err, syscall.EBUSY):
		return false, nil
	}
	return false, fmt.Errorf("volumes: remove %s: %w", dir, err)
}
