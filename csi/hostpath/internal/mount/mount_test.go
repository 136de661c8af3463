package mount

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestUnescape(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"plain path", "/var/lib/x", "/var/lib/x"},
		{"space", `/mnt/a\040b`, "/mnt/a b"},
		{"tab, newline and backslash", `/a\011b\012c\134d`, "/a\tb\nc\\d"},
		{"backslash not followed by three octal digits", `/a\09b\1`, `/a\09b\1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, unescape(tt.in))
		})
	}
}

func TestMountTable(t *testing.T) {
	root, err := IsMountPoint("/")
	require.NoError(t, err)
	require.True(t, root, "/ is always a mount point")

	dir := t.TempDir()
	mounted, err := IsMountPoint(dir)
	require.NoError(t, err)
	require.False(t, mounted)
	under, err := Under(dir)
	require.NoError(t, err)
	require.Empty(t, under)

	_, err = IsMountPoint(dir + "/missing")
	require.Error(t, err)
}

// TestIsMountPointAgreesWithTheMountTable checks the kernel's answer
// (statx) against the mount table's, on a bind mount, its parent, and a
// symbolic link to it.
func TestIsMountPointAgreesWithTheMountTable(t *testing.T) {
	dir := t.TempDir()
	source, target, link := filepath.Join(dir, "source"), filepath.Join(dir, "target"), filepath.Join(dir, "link")
	require.NoError(t, os.Mkdir(source, 0o750))
	require.NoError(t, os.Mkdir(target, 0o750))
	require.NoError(t, os.Symlink(target, link))
	if err := Bind(source, target, false); err != nil {
		t.Skipf("bind mounts are not permitted here: %v", err)
	}
	t.Cleanup(func() { require.NoError(t, Detach(target)) })
	for _, tt := range []struct {
		path string
		want bool
	}{{target, true}, {link, true}, {dir, false}, {source, false}, {"/", true}} {
		mounted, err := IsMountPoint(tt.path)
		require.NoError(t, err)
		require.Equal(t, tt.want, mounted, tt.path)
		resolved, err := filepath.EvalSymlinks(tt.path)
		require.NoError(t, err)
		points, err := Points()
		require.NoError(t, err)
		require.Equal(t, tt.want, slices.Contains(points, resolved), "the mount table on %s", tt.path)
	}
	_, err := IsMountPoint(filepath.Join(dir, "missing"))
	require.ErrorIs(t, err, fs.ErrNotExist)
}
