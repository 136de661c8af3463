package volumes

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/registry"
)

// Directory names under a node plugin's root, as Nomad names them.
const (
	// StagingDirName holds the staging paths: <plugin root>/staging/<namespace>/<volume>/<usage>.
	StagingDirName = "staging"
	// PerAllocDirName holds the target paths: <plugin root>/per-alloc/<alloc>/<volume>/<usage>.
	PerAllocDirName = "per-alloc"
)

// ValidatePathID checks an ID or namespace that becomes one segment of a
// path: registry.ValidateID's rules (present, at most registry.MaxIDLen
// bytes, no path separator, no "..", no control characters), and not ".".
// field names it in the error, which wraps [ErrInvalidVolumeRequest].
func ValidatePathID(field, v string) error {
	return csi.InvalidVolumeRequest(appendIDProblem(nil, field, v))
}

// appendIDProblem appends to problems what is wrong with v as a path
// segment, if anything.
func appendIDProblem(problems []error, field, v string) []error {
	if err := registry.ValidateID(field, v); err != nil {
		// Keep the registry's words, not its package prefix.
		return append(problems, errors.New(strings.TrimPrefix(err.Error(), registry.ErrInvalid.Error()+": ")))
	}
	if v == "." {
		return append(problems, fmt.Errorf("%s must not be %q", field, v))
	}
	return problems
}

// PluginPaths lays out the directories of one node plugin under the volume
// manager's root: <root>/<plugin>/staging/... and <root>/<plugin>/per-alloc/....
// The zero value is not usable; make one with [NewPluginPaths].
type PluginPaths struct {
	root string
}

// NewPluginPaths returns the layout for plugin under root, which must be an
// absolute path. The plugin name is checked with [ValidatePathID].
func NewPluginPaths(root, plugin string) (PluginPaths, error) {
	p, problems := newPluginPaths(root, plugin)
	return p, csi.InvalidVolumeRequest(problems)
}

func newPluginPaths(root, plugin string) (PluginPaths, []error) {
	var problems []error
	if !filepath.IsAbs(root) {
		problems = append(problems, fmt.Errorf("root %q must be an absolute path", root))
	}
	problems = appendIDProblem(problems, "plugin name", plugin)
	if len(problems) > 0 {
		return PluginPaths{}, problems
	}
	return PluginPaths{root: filepath.Join(root, plugin)}, nil
}

// Root is the plugin's directory: <root>/<plugin>.
func (p PluginPaths) Root() string { return p.root }

// Staging returns <plugin root>/staging/<namespace>/<volumeID>/<usage>, where
// the volume is staged for u. Every part is checked first; the error wraps
// [ErrInvalidVolumeRequest].
func (p PluginPaths) Staging(namespace, volumeID string, u csi.Usage) (string, error) {
	problems := appendIDProblem(nil, "namespace", namespace)
	return p.join(problems, volumeID, u, StagingDirName, namespace)
}

// Target returns <plugin root>/per-alloc/<allocID>/<volumeID>/<usage>, where
// the volume is published for the alloc. Every part is checked first; the
// error wraps [ErrInvalidVolumeRequest].
func (p PluginPaths) Target(allocID, volumeID string, u csi.Usage) (string, error) {
	problems := appendIDProblem(nil, "alloc ID", allocID)
	return p.join(problems, volumeID, u, PerAllocDirName, allocID)
}

// join returns <plugin root>/<dir>/<id>/<volumeID>/<usage> unless there are
// problems with it, or it would leave <plugin root>/<dir> (which the checks
// already rule out; this is the last line of defence).
func (p PluginPaths) join(problems []error, volumeID string, u csi.Usage, dir, id string) (string, error) {
	problems = appendIDProblem(problems, "volume ID", volumeID)
	problems = append(problems, u.Problems()...)
	if p.root == "" {
		problems = append(problems, errors.New("plugin paths have no root (use NewPluginPaths)"))
	}
	if err := csi.InvalidVolumeRequest(problems); err != nil {
		return "", err
	}
	base := filepath.Join(p.root, dir)
	path := filepath.Join(base, id, volumeID, u.String())
	if rel, err := filepath.Rel(base, path); err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return "", fmt.Errorf("csi: %w: path %q escapes %q", csi.ErrInvalidVolumeRequest, path, base)
	}
	return path, nil
}

// removeEmptyDirs removes dir and then each parent below stop while they
// are empty, and stops at the first that is not (or is a mount point). It
// reports the first error other than the directory being gone or not empty.
func removeEmptyDirs(dir, stop string) error {
	for dir != stop && strings.HasPrefix(dir, stop+string(filepath.Separator)) {
		err := os.Remove(dir)
		switch {
		case err == nil, errors.Is(err, os.ErrNotExist):
		case dirNotEmpty(err):
			return nil
		default:
			return fmt.Errorf("csi: remove %s: %w", dir, err)
		}
		dir = filepath.Dir(dir)
	}
	return nil
}

// dirNotEmpty reports whether err says a directory still has entries.
func dirNotEmpty(err error) bool {
	return errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST)
}
