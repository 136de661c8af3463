package mount

import (
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
