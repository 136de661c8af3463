package fleet_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/fleet"
)

// TestAKeyringFileIsMadeAndReadAndABadOneRefused generates a keyring,
// adds a second key, which becomes the primary, and refuses keyring files
// that are readable by others, malformed or empty, naming the file, the
// line and the remedy.
func TestAKeyringFileIsMadeAndReadAndABadOneRefused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keyring")
	first, err := fleet.GenerateKey(path)
	require.NoError(t, err)
	info, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	second, err := fleet.GenerateKey(path)
	require.NoError(t, err)
	k, err := fleet.LoadKeyring(path)
	require.NoError(t, err)
	require.Equal(t, []string{second, first}, k.IDs())
	require.Equal(t, second, k.Primary())

	for name, tc := range map[string]struct {
		text string
		mode os.FileMode
		want string
	}{
		"readable by others":      {"k1 " + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n", 0o644, "chmod 600"},
		"a key of the wrong size": {"k1 AAAA\n", 0o600, ":1: key k1 is not 32 bytes"},
		"a line of three fields":  {"# a comment\nk1 a b\n", 0o600, ":2: 3 fields"},
		"no key":                  {"# nothing\n", 0o600, "holds no key"},
		"an ID that is no name":   {"a/b AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n", 0o600, `:1: key ID "a/b" must not contain a path separator`},
		"an ID too long": {strings.Repeat("k-", 33) + " AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n", 0o600,
			`:1: key ID "` + strings.Repeat("k-", 33) + `" is 66 characters; use at most 64`},
		"a key ID twice": {"k1 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\nk1 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n", 0o600,
			":2: key ID k1 appears twice"},
	} {
		t.Run(name, func(t *testing.T) {
			bad := filepath.Join(dir, "bad")
			require.NoError(t, os.WriteFile(bad, []byte(tc.text), tc.mode))
			require.NoError(t, os.Chmod(bad, tc.mode))
			_, err := fleet.LoadKeyring(bad)
			require.ErrorIs(t, err, fleet.ErrKeyring)
			require.ErrorContains(t, err, tc.want)
		})
	}
	_, err = fleet.LoadKeyring(filepath.Join(dir, "missing"))
	require.ErrorContains(t, err, "plugvisor keyring generate")

	// A line with its fields swapped is refused without showing the key,
	// whether the key passes as an ID or not (a "/" in it).
	for _, key := range []string{"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA/="} {
		bad := filepath.Join(dir, "swapped")
		require.NoError(t, os.WriteFile(bad, []byte(key+" k1\n"), 0o600))
		_, err := fleet.LoadKeyring(bad)
		require.ErrorIs(t, err, fleet.ErrKeyring)
		require.ErrorContains(t, err, ":1: the first field is a key, not shown; write the key ID first")
		require.NotContains(t, err.Error(), key)
	}
}
