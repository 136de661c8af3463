package discovery

import (
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/messages"
)

// nobody is the uid the tests give another user's files.
const nobody = 65534

// needRoot skips a test that hands files to another user.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: it chowns files to another user")
	}
}

// openDir makes a directory anyone may write, as /tmp is.
func openDir(t *testing.T, path string) string {
	t.Helper()
	require.NoError(t, os.MkdirAll(path, 0o755))
	require.NoError(t, os.Chmod(path, 0o777))
	return path
}

// TestAPluginFileAnotherUserCouldHavePutThereIsPassedOver is part of
// attack 5 of issue 39: a socket of uid 65534 in a 0777 directory became a
// csi-node plugin. Sockets and spec files that a user other than root and
// the agent's owns, in a directory its group or others can write, are
// refused with ErrUntrusted naming the owner and the remedy: the file
// itself, a symbolic link to it, the <name>/ directory holding it, or
// the file a link leads to. Files of root in such a directory, and files
// of another user in a directory only its owner writes, are found.
func TestAPluginFileAnotherUserCouldHavePutThereIsPassedOver(t *testing.T) {
	needRoot(t)
	root := tempDir(t)
	open := openDir(t, filepath.Join(root, "open"))
	closed := filepath.Join(root, "closed")
	elsewhere := openDir(t, filepath.Join(root, "elsewhere"))
	chown := func(path string) { require.NoError(t, os.Lchown(path, nobody, nobody)) }

	makeSocket(t, filepath.Join(open, "evil.sock"))
	chown(filepath.Join(open, "evil.sock"))
	writeFile(t, filepath.Join(open, "evilspec.spec"), "tcp://127.0.0.1:1")
	chown(filepath.Join(open, "evilspec.spec"))
	makeSocket(t, filepath.Join(closed, "real.sock"))
	require.NoError(t, os.Symlink(filepath.Join(closed, "real.sock"), filepath.Join(open, "linked.sock")))
	chown(filepath.Join(open, "linked.sock"))
	makeSocket(t, filepath.Join(open, "nested", "nested.sock"))
	require.NoError(t, os.Chmod(filepath.Join(open, "nested"), 0o755))
	chown(filepath.Join(open, "nested"))
	makeSocket(t, filepath.Join(elsewhere, "target.sock"))
	chown(filepath.Join(elsewhere, "target.sock"))
	require.NoError(t, os.Symlink(filepath.Join(elsewhere, "target.sock"), filepath.Join(closed, "pointer.sock")))
	makeSocket(t, filepath.Join(open, "good.sock"))
	makeSocket(t, filepath.Join(closed, "theirs.sock"))
	chown(filepath.Join(closed, "theirs.sock"))

	candidates, errs := Scan(Dirs{Sockets: []string{open, closed}, Specs: []string{open}})
	var found []string
	for _, c := range candidates {
		found = append(found, c.Name)
	}
	require.Equal(t, []string{"good", "real", "theirs"}, found)
	refused := map[string]string{}
	for _, err := range errs {
		var pe *PluginError
		require.ErrorAs(t, err, &pe)
		require.ErrorIs(t, err, ErrUntrusted, pe.Name)
		refused[pe.Name] = err.Error()
	}
	names := make([]string, 0, len(refused))
	for n := range refused {
		names = append(names, n)
	}
	sort.Strings(names)
	require.Equal(t, []string{"evil", "evilspec", "linked", "nested", "pointer"}, names)
	require.Equal(t, `untrusted plugin file: plugin "evil" (`+open+`/evil.sock): it is owned by uid 65534, `+
		`neither root nor the agent's user (uid 0), in `+open+`, a directory its group or others can write (mode 0777): `+
		`anyone could have put it there; have root or the agent's user own it, or make the directory writable by its owner only (chmod go-w `+open+`)`,
		refused["evil"])
	require.Contains(t, refused["nested"], open+"/nested is owned by uid 65534")
	require.Contains(t, refused["pointer"], "the file it links to, "+elsewhere+"/target.sock, is owned by uid 65534")
}

// TestDiscoveryShowsAnUntrustedSocketAsInvalidAndRegistersNothing: the
// refusal is visible in discovery's state, and the registry never hears
// of the plugin, whatever its socket would answer.
func TestDiscoveryShowsAnUntrustedSocketAsInvalidAndRegistersNothing(t *testing.T) {
	needRoot(t)
	e := newEnv(t, nil)
	require.NoError(t, os.Chmod(e.sockets, 0o777))
	// Made aside and moved in, so that no scan sees it before its owner
	// changes.
	aside := filepath.Join(tempDir(t), "evil.sock")
	volumePlugin(t, aside)
	require.NoError(t, os.Lchown(aside, nobody, nobody))
	require.NoError(t, os.Rename(aside, filepath.Join(e.sockets, "evil.sock")))
	volumePlugin(t, filepath.Join(e.sockets, "good.sock"))

	got := e.await(t, "evil", messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_INVALID)
	require.Contains(t, got.GetError(), "untrusted plugin file")
	require.Contains(t, got.GetError(), "chmod go-w "+e.sockets)
	e.registered(t, "docker-volume", "good")
	_, ok := e.registry.Snapshot().Current("docker-volume", "evil")
	require.False(t, ok, "the untrusted socket is not registered")
}
