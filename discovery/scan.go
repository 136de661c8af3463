package discovery

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/plugvisor/plugvisor/names"
)

// Dirs lists the directories discovery searches, each in order of priority.
// Every directory must be an absolute path; one that does not exist is
// skipped, as Docker does.
type Dirs struct {
	// Sockets are searched for <name>.sock and <name>/<name>.sock.
	Sockets []string
	// Specs are searched for <name>.spec, <name>/<name>.spec, <name>.json and
	// <name>/<name>.json.
	Specs []string
}

// DockerDirs returns the directories Docker searches when it runs as root:
// sockets in /run/docker/plugins, spec files in /etc/docker/plugins, then
// /usr/lib/docker/plugins.
func DockerDirs() Dirs {
	return Dirs{
		Sockets: []string{"/run/docker/plugins"},
		Specs:   []string{"/etc/docker/plugins", "/usr/lib/docker/plugins"},
	}
}

// place is one path where a plugin file may be, the kind it would be, and
// the watched directory it is in.
type place struct {
	path string
	kind Kind
	dir  string
}

// places lists where plugin name may be found, in Docker's order of
// precedence: every socket directory first, then, for each spec directory in
// turn, <name>.spec, <name>/<name>.spec, <name>.json, <name>/<name>.json.
func (d Dirs) places(name string) []place {
	var ps []place
	at := func(dir, ext string, kind Kind) {
		ps = append(ps,
			place{filepath.Join(dir, name+ext), kind, dir},
			place{filepath.Join(dir, name, name+ext), kind, dir})
	}
	for _, dir := range d.Sockets {
		at(dir, ".sock", KindSocket)
	}
	for _, dir := range d.Specs {
		at(dir, ".spec", KindSpec)
		at(dir, ".json", KindJSON)
	}
	return ps
}

// usable returns the directories of d that are absolute paths, and an error
// for each that is not.
func (d Dirs) usable() (Dirs, []error) {
	var errs []error
	keep := func(dirs []string) []string {
		var out []string
		for _, dir := range dirs {
			if !filepath.IsAbs(dir) {
				errs = append(errs, fmt.Errorf("plugin directory %q is not an absolute path", dir))
				continue
			}
			out = append(out, dir)
		}
		return out
	}
	return Dirs{Sockets: keep(d.Sockets), Specs: keep(d.Specs)}, errs
}

// Lookup finds plugin name in dirs the way Docker's registry does: the first
// place in order of precedence (see Dirs) that holds a socket, or a spec file,
// decides. As in Docker, a <name>.sock that is not a socket, or a path that
// cannot be resolved (a symlink loop, a dangling symlink), is passed over for
// the places after it; so is, unlike Docker, a file that another user than
// root and the agent's could have put there (ErrUntrusted); the problem is returned only when no place has the
// plugin. A spec file that is found but bad is the answer: its error is
// returned, with no fallback to later places.
//
// Errors are *PluginError values matching ErrInvalidName, ErrNotFound or one
// of the sentinels for bad files.
func Lookup(dirs Dirs, name string) (Candidate, error) {
	if err := ValidateName(name); err != nil {
		return Candidate{}, &PluginError{Name: name, Kind: ErrInvalidName, Err: err}
	}
	dirs, errs := dirs.usable()
	if len(errs) > 0 {
		return Candidate{}, errs[0]
	}
	return lookup(dirs, name)
}

func lookup(dirs Dirs, name string) (Candidate, error) {
	var passed error
	for _, p := range dirs.places(name) {
		c, found, err := probe(name, p)
		if found {
			return c, err
		}
		if passed == nil {
			passed = err
		}
	}
	if passed != nil {
		return Candidate{}, passed
	}
	return Candidate{}, &PluginError{Name: name, Kind: ErrNotFound}
}

// probe looks at one place. found says whether the place settles the lookup;
// when it does not, err is a problem that was passed over, or nil.
func probe(name string, p place) (c Candidate, found bool, err error) {
	perr := func(kind, err error) error { return &PluginError{Name: name, Path: p.path, Kind: kind, Err: err} }
	fi, err := os.Stat(p.path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			return Candidate{}, false, perr(ErrUnreadable, err)
		}
		if _, lerr := os.Lstat(p.path); lerr == nil {
			return Candidate{}, false, perr(ErrUnreadable, fmt.Errorf("dangling symlink: %w", err))
		}
		return Candidate{}, false, nil
	}
	switch err := checkTrusted(p.dir, p.path); {
	case errors.Is(err, fs.ErrNotExist):
		// Gone since the stat (a socket being recreated): not here, and
		// not bad, or the plugin would skip its grace period.
		return Candidate{}, false, nil
	case err != nil:
		return Candidate{}, false, perr(ErrUntrusted, err)
	}
	if p.kind != KindSocket {
		if !fi.Mode().IsRegular() {
			return Candidate{}, true, perr(ErrBadSpec, fmt.Errorf("%s, not a regular file", names.DescribeMode(fi.Mode())))
		}
		c, err := parseSpecFile(name, p.path, p.kind)
		return c, true, err
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return Candidate{}, false, perr(ErrNotSocket, errors.New(names.DescribeMode(fi.Mode())))
	}
	if err := checkSocketPath(p.path); err != nil {
		return Candidate{}, true, perr(ErrSocketPathTooLong, err)
	}
	return Candidate{Name: name, Kind: KindSocket, Source: p.path, Addr: "unix://" + p.path, SocketPath: p.path}, true, nil
}

// Scan finds every plugin in dirs: each <name>.sock, <name>/<name>.sock in
// the socket directories and each <name>.spec, <name>.json (or the same in
// <name>/) in the spec directories, sorted by name. A name found in several
// places yields one Candidate, the one Lookup gives for it.
//
// Scan never stops at a bad plugin: each plugin that cannot be used gives an
// error (a *PluginError naming the plugin and its file), and the others are
// still returned. A directory that cannot be read gives an error too; one
// that does not exist is skipped. Other files are ignored, and so are
// subdirectories without a <name>/<name>.<ext> file (Docker's managed plugins
// keep their sockets in such directories).
func Scan(dirs Dirs) ([]Candidate, []error) {
	dirs, errs := dirs.usable()
	seen := map[string]string{} // plugin name → the first file that named it
	add := func(name, path string) {
		if _, ok := seen[name]; !ok {
			seen[name] = path
		}
	}
	for _, dir := range dirs.Sockets {
		errs = append(errs, collect(dir, add, ".sock")...)
	}
	for _, dir := range dirs.Specs {
		errs = append(errs, collect(dir, add, ".spec", ".json")...)
	}
	names := make([]string, 0, len(seen))
	for name := range seen {
		names = append(names, name)
	}
	sort.Strings(names)

	var out []Candidate
	for _, name := range names {
		if err := ValidateName(name); err != nil {
			errs = append(errs, &PluginError{Name: name, Path: seen[name], Kind: ErrInvalidName, Err: err})
			continue
		}
		c, err := lookup(dirs, name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, c)
	}
	return out, errs
}

// collect calls add for each plugin file with one of exts in dir.
func collect(dir string, add func(name, path string), exts ...string) []error {
	entries, err := os.ReadDir(dir)
	if err != nil && errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var errs []error
	if err != nil {
		errs = append(errs, fmt.Errorf("%w: %s: %w", ErrUnreadable, dir, err))
	}
	for _, e := range entries {
		n := e.Name()
		if ext := filepath.Ext(n); slices.Contains(exts, ext) {
			if name := strings.TrimSuffix(n, ext); name != "" { // ".spec" names no plugin: ignored
				add(name, filepath.Join(dir, n))
			}
			continue
		}
		for _, ext := range exts {
			p := filepath.Join(dir, n, n+ext)
			if _, err := os.Lstat(p); err == nil {
				add(n, p)
				break
			}
		}
	}
	return errs
}
