//go:build unix

package discovery

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// checkTrusted refuses the plugin file at path, found below the watched
// directory dir, when a user other than root and the agent's own could
// have put it there: when it, the <name>/ directory holding it, or the
// file a symbolic link leads to, is owned by such a user and sits in a
// directory that its group or others may write. Anyone could have made a
// socket there, and the agent would send it the volumes of the plugin,
// secrets included. kubelet's plugin watcher expects such directories at
// mode 0750 for the same reason.
func checkTrusted(dir, path string) error {
	rel, err := filepath.Rel(dir, path)
	if err != nil {
		return err
	}
	parent := dir
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		entry, what := filepath.Join(parent, part), "it"
		if entry != path {
			what = entry
		}
		if err := checkEntry(parent, entry, what, os.Lstat); err != nil {
			return err
		}
		parent = entry
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil || real == path {
		return err
	}
	return checkEntry(filepath.Dir(real), real, "the file it links to, "+real+",", os.Stat)
}

// checkEntry refuses entry (called what), in directory parent, when
// another user owns it and the directory is writable by its group or
// others.
func checkEntry(parent, entry, what string, stat func(string) (fs.FileInfo, error)) error {
	fi, err := stat(entry)
	if err != nil {
		return err
	}
	owner, ok := ownerOf(fi)
	if !ok || owner == 0 || owner == uint32(os.Geteuid()) {
		return nil
	}
	di, err := os.Stat(parent)
	if err != nil {
		return err
	}
	if di.Mode().Perm()&0o022 == 0 {
		return nil
	}
	return fmt.Errorf("%s is owned by uid %d, neither root nor the agent's user (uid %d), in %s, a directory its group or others can write (mode %04o): "+
		"anyone could have put it there; have root or the agent's user own it, or make the directory writable by its owner only (chmod go-w %s)",
		what, owner, os.Geteuid(), parent, di.Mode().Perm(), parent)
}

// ownerOf is the uid owning fi.
func ownerOf(fi fs.FileInfo) (uint32, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Uid, true
}
