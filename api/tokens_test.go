package api_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/api"
)

func TestATokenFileIsParsedOrRefusedByLine(t *testing.T) {
	long := strings.Repeat("t", api.MinTokenLength)
	cases := []struct {
		name, file string
		want       string // error, or "" when valid
	}{
		{"tokens with comments and blank lines", "# ops\n\n" + long + "1 write\n  " + long + "2   read  \n", ""},
		{"an empty file", "# nothing\n", "lists no token"},
		{"unknown rights", long + " superuser\n", `line 1: rights must be a comma-separated list of read, volumes, plugins, admin (or write, the same as admin), not "superuser"`},
		{"an unknown right in a list", long + " volumes,mount\n", `not "volumes,mount"`},
		{"a token without rights", "\n" + long + "\n", "line 2: want a token, its rights (e.g. read, or volumes,plugins) and optionally its name"},
		{"four fields", long + " read ops extra\n", "found 4 fields"},
		{"a name that is not a name", long + " read ../ops\n", `line 1: token name "../ops"`},
		{"a name given twice", long + "1 read ops\n" + long + "2 admin ops\n", `line 2: the name "ops" is the name of line 1 too`},
		{"a name taking a default name", long + "1 read\n" + long + "2 admin line1\n", `line 2: the name "line1" is the name of line 1 too`},
		{"a short token", "short write\n", "the token is 5 characters; use at least 16"},
		{"a token listed twice", long + " write\n" + long + " read\n", "line 2: the token of line 1 is listed again"},
		{"a non-ASCII token", long + "é write\n", "printable ASCII"},
		{"the rights before the token", "admin " + long + " ops\n",
			"line 1: the rights field is 16 characters and no list of rights; it is not shown, as it may be the token: write the token first, then its rights"},
		{"the name before the token", "ops " + long + " admin\n", "it is not shown, as it may be the token"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := api.ParseTokens(strings.NewReader(tc.file))
			if tc.want == "" {
				require.NoError(t, err)
				require.Equal(t, 2, got.Len())
				require.Equal(t, api.Write, got.Rights(long+"1"))
				require.Equal(t, api.Read, got.Rights(long+"2"))
				require.Equal(t, api.NoRights, got.Rights(long))
				require.Equal(t, api.NoRights, got.Rights(""))
				return
			}
			require.ErrorIs(t, err, api.ErrInvalidTokens)
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), long, "errors never show a token")
		})
	}
}

// TestATokensRightsAndNameAreItsLine: rights are a list, each including
// read; write (the old files' word) and admin are every right; a line
// without a name is named by its number.
func TestATokensRightsAndNameAreItsLine(t *testing.T) {
	long := strings.Repeat("t", api.MinTokenLength)
	cases := []struct {
		rights, name string
		want         api.Rights
		shown        string
	}{
		{"read", "", api.Read, "read"},
		{"volumes", "scheduler", api.Read | api.Volumes, "read,volumes"},
		{"plugins", "orchestrator", api.Read | api.Plugins, "read,plugins"},
		{"plugins,volumes", "both", api.Read | api.Volumes | api.Plugins, "read,volumes,plugins"},
		{"admin", "ops", api.Write, "admin"},
		{"write", "", api.Write, "admin"},
	}
	for _, tc := range cases {
		t.Run(tc.rights, func(t *testing.T) {
			tokens, err := api.ParseTokens(strings.NewReader("# first line\n" + long + " " + tc.rights + " " + tc.name + "\n"))
			require.NoError(t, err)
			name, rights := tokens.Lookup(long)
			require.Equal(t, tc.want, rights)
			require.Equal(t, tc.shown, rights.String())
			require.Equal(t, map[bool]string{true: "line2", false: tc.name}[tc.name == ""], name)
		})
	}
}

func TestATokenFileOthersCanReadIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(path, []byte(strings.Repeat("t", 20)+" write\n"), 0o644))
	_, err := api.LoadTokens(path)
	require.ErrorIs(t, err, api.ErrInvalidTokens)
	require.ErrorContains(t, err, "mode 0644")
	require.ErrorContains(t, err, "chmod 600 "+path)

	require.NoError(t, os.Chmod(path, 0o600))
	tokens, err := api.LoadTokens(path)
	require.NoError(t, err)
	require.Equal(t, api.Write, tokens.Rights(strings.Repeat("t", 20)))
}

func TestATokenFileThatIsNotARegularFileIsRefusedWithoutChmodAdvice(t *testing.T) {
	for _, path := range []string{os.DevNull, t.TempDir()} {
		_, err := api.LoadTokens(path)
		require.ErrorIs(t, err, api.ErrInvalidTokens)
		require.ErrorContains(t, err, "use a regular file with mode 0600")
		require.NotContains(t, err.Error(), "chmod", "changing the mode of %s is not the remedy", path)
	}
}
