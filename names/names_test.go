package names_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/names"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		problem string // "" when the value is accepted
	}{
		{"a plain name", "hostpath.csi.example", ""},
		{"letters, digits, dashes and underscores", "ebs-csi_2", ""},
		{"a name of exactly the limit", strings.Repeat("a", names.MaxLen), ""},
		{"non-ASCII letters", "volumé-日本", ""},
		{"empty", "", "must not be empty"},
		{"one byte over the limit", strings.Repeat("a", names.MaxLen+1), "over the limit of 128"},
		{"a single dot", ".", `must not be "."`},
		{"two dots", "..", `must not contain ".."`},
		{"two dots inside", "a..b", `must not contain ".."`},
		{"a slash", "a/b", "path separator"},
		{"a backslash", `a\b`, "path separator"},
		{"NUL", "a\x00b", "must not contain NUL"},
		{"a newline", "a\nb", "control character"},
		{"DEL", "a\x7fb", "control character"},
		{"a C1 control", "a\u0085b", "control character"},
		{"right-to-left override", "evil\u202Egpj.exe", "bidirectional"},
		{"left-to-right isolate", "a\u2066b", "bidirectional"},
		{"pop directional isolate", "a\u2069b", "bidirectional"},
		{"left-to-right mark", "a\u200Eb", "bidirectional"},
		{"right-to-left mark", "a\u200Fb", "bidirectional"},
		{"zero-width space", "a\u200Bb", "zero-width"},
		{"zero-width joiner", "a\u200Db", "zero-width"},
		{"byte order mark", "\uFEFFa", "zero-width"},
		{"word joiner", "a\u2060b", "zero-width"},
		{"invalid UTF-8", "a\xffb", "not valid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := names.Check("plugin name", tt.value)
			if tt.problem == "" {
				require.NoError(t, err)
				require.True(t, names.Valid(tt.value))
				return
			}
			require.ErrorIs(t, err, names.ErrInvalid)
			require.ErrorContains(t, err, "plugin name")
			require.ErrorContains(t, err, tt.problem)
			require.False(t, names.Valid(tt.value))
		})
	}
}

func TestCheckNamesTheRemedy(t *testing.T) {
	err := names.Check("volume ID", "a\u202Eb")
	require.ErrorContains(t, err, "use letters, digits")
	// The offending character is shown escaped, never raw.
	require.NotContains(t, err.Error(), "\u202E")
	require.Contains(t, err.Error(), `\u202e`)
}

func TestCheckSocketPath(t *testing.T) {
	tests := []struct {
		name    string
		path    string
		problem string
	}{
		{"an absolute clean path", "/run/plugins/a.sock", ""},
		{"exactly the unix limit", "/" + strings.Repeat("s", names.MaxSocketPathLen-1), ""},
		{"one byte over the unix limit", "/" + strings.Repeat("s", names.MaxSocketPathLen), "over the unix limit of 107"},
		{"empty", "", "must not be empty"},
		{"relative", "run/a.sock", "must be absolute"},
		{"with dot-dot", "/run/../etc/a.sock", "must be clean"},
		{"with a repeated slash", "/run//a.sock", "must be clean"},
		{"NUL", "/run/a\x00.sock", "NUL"},
		{"a bidi override", "/run/a\u202E.sock", "bidirectional"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := names.CheckSocketPath("socket path", tt.path)
			if tt.problem == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, names.ErrInvalid)
			require.ErrorContains(t, err, "socket path")
			require.ErrorContains(t, err, tt.problem)
		})
	}
}

func TestCheckSocketFile(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "plugin.sock")
	l, err := net.Listen("unix", sock)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	regular := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(regular, []byte("x"), 0o600))
	link := filepath.Join(dir, "link.sock")
	require.NoError(t, os.Symlink(sock, link))

	tests := []struct {
		name    string
		path    string
		problem string
	}{
		{"a listening unix socket", sock, ""},
		{"a symbolic link to a socket", link, ""},
		{"a path where nothing exists yet", filepath.Join(dir, "later.sock"), ""},
		{"a regular file", regular, "is a regular file, not a socket"},
		{"a directory", dir, "is a directory, not a socket"},
		{"a character device", "/dev/zero", "is a character device, not a socket"},
		{"a relative path", "plugin.sock", "must be absolute"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := names.CheckSocketFile("socket path", tt.path)
			if tt.problem == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, names.ErrInvalid)
			require.ErrorContains(t, err, tt.problem)
			if strings.Contains(tt.problem, "not a socket") {
				require.ErrorIs(t, err, names.ErrNotSocket)
			}
		})
	}
}

func TestCheckKeyAllowsCSIKeysAndRefusesWhatFoolsTheEye(t *testing.T) {
	for _, k := range []string{"token", "csi.storage.k8s.io/fstype", "a..b", "clé"} {
		require.NoError(t, names.CheckKey("parameters", k))
	}
	for k, want := range map[string]string{
		"":                                     "must not be empty",
		"a\u202eb":                             "bidirectional",
		"a\u200bb":                             "zero-width",
		"a\x00b":                               "U+0000",
		"\xff\xfe":                             "not valid UTF-8",
		strings.Repeat("k", names.MaxKeyLen+1): "over the limit of 256",
	} {
		err := names.CheckKey("secrets", k)
		require.ErrorIs(t, err, names.ErrInvalid, "%q", k)
		require.ErrorContains(t, err, "secrets key ")
		require.ErrorContains(t, err, want)
	}
}
