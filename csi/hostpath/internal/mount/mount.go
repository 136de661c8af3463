// Package mount bind-mounts and unmounts directories and reads the mount table
// (/proc/self/mountinfo) for the hostpath driver and its test helpers.
package mount

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/plugvisor/plugvisor/errclass"
)

// ErrUnsupported is returned by Bind, Unmount and Detach on systems without
// Linux mount system calls.
var ErrUnsupported = errclass.New(errclass.Unsupported, "bind mounts are only supported on Linux")

// mountInfoPath is the mount table of the calling process.
const mountInfoPath = "/proc/self/mountinfo"

// Points returns every mount point in the mount table of this process, in the
// order the kernel lists them (oldest first).
func Points() ([]string, error) {
	f, err := os.Open(mountInfoPath)
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		// Fields: id parent major:minor root mount-point options ...
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		points = append(points, unescape(fields[4]))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	return points, nil
}

// IsMountPoint reports whether path is a mount point. Symbolic links in the
// path are resolved first, as the kernel lists resolved paths. Where the
// kernel says so in one statx call (Linux 5.8 and later) it asks that;
// elsewhere it reads the mount table, whose length it costs.
func IsMountPoint(path string) (bool, error) {
	if root, known, err := isMountRoot(path); known || err != nil {
		return root, err
	}
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return false, fmt.Errorf("resolve %s: %w", path, err)
	}
	points, err := Points()
	if err != nil {
		return false, err
	}
	for _, p := range points {
		if p == resolved {
			return true, nil
		}
	}
	return false, nil
}

// Under returns the mount points at or below dir, newest first, which is the
// order they can be unmounted in. Symbolic links in dir are resolved first.
func Under(dir string) ([]string, error) {
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", dir, err)
	}
	points, err := Points()
	if err != nil {
		return nil, err
	}
	var under []string
	for i := len(points) - 1; i >= 0; i-- {
		p := points[i]
		if p == resolved || strings.HasPrefix(p, resolved+string(filepath.Separator)) {
			under = append(under, p)
		}
	}
	return under, nil
}

// unescape undoes the octal escapes (\040 for a space, \011, \012, \134) that
// the kernel writes into mount table paths.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }
