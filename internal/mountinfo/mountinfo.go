package mountinfo

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// DefaultPath is the kernel's mount table of this process.
const DefaultPath = "/proc/self/mountinfo"

// Mount is one line of /proc/<pid>/mountinfo (proc(5)).
type Mount struct {
	ID, ParentID int
	// Root is the path within the source file system that is mounted.
	Root string
	// MountPoint is where it is mounted, unescaped.
	MountPoint string
	// Options are the per-mount options ("rw,relatime").
	Options string
	FSType  string
	Source  string
}

// Parse reads a mountinfo table. A line that does not have the
// fields proc(5) describes is an error naming its line number; octal
// escapes (\040 for a space, ...) in paths are decoded.
func Parse(r io.Reader) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		m, err := parseMountInfoLine(string(line))
		if err != nil {
			return nil, fmt.Errorf("mountinfo line %d: %w", n, err)
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	return out, nil
}

func parseMountInfoLine(line string) (Mount, error) {
	fields := strings.Split(line, " ")
	sep := -1
	for i := 6; i < len(fields); i++ {
		if fields[i] == "-" {
			sep = i
			break
		}
	}
	if len(fields) < 10 || sep < 0 || len(fields) < sep+4 {
		return Mount{}, fmt.Errorf("want at least 10 space-separated fields with a \"-\" separator after the 6th, got %d", len(fields))
	}
	id, err := strconv.Atoi(fields[0])
	if err != nil {
		return Mount{}, fmt.Errorf("mount ID %q is not a number", fields[0])
	}
	parent, err := strconv.Atoi(fields[1])
	if err != nil {
		return Mount{}, fmt.Errorf("parent ID %q is not a number", fields[1])
	}
	m := Mount{ID: id, ParentID: parent, Options: fields[5], FSType: unescapeOctal(fields[sep+1]), Source: unescapeOctal(fields[sep+2])}
	m.Root = unescapeOctal(fields[3])
	m.MountPoint = unescapeOctal(fields[4])
	if !strings.HasPrefix(m.MountPoint, "/") {
		return Mount{}, fmt.Errorf("mount point %q is not absolute", m.MountPoint)
	}
	return m, nil
}

// unescapeOctal decodes the \NNN escapes the kernel writes for space, tab,
// newline and backslash; anything else is kept as it is.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			v := (s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0')
			if s[i+1] <= '3' {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// PointsUnder returns the set of mount points in the mount table at
// path (DefaultPath for this process's) that are at or below root.
func PointsUnder(path, root string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	defer func() { _ = f.Close() }()
	mounts, err := Parse(f)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, m := range mounts {
		if m.MountPoint == root || strings.HasPrefix(m.MountPoint, root+string(filepath.Separator)) {
			out[m.MountPoint] = true
		}
	}
	return out, nil
}
