package discovery

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(crossCheckEnv) != "" {
		// The cross-check child runs Docker's plugin client, which keeps
		// idle connections (and their goroutines) open by design.
		os.Exit(m.Run())
	}
	goleak.VerifyTestMain(m)
}

// tempDir returns a new directory with a short path (socket paths must stay
// under 108 bytes), removed when the test ends.
func tempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pv")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
}

// makeSocket leaves a unix socket file at path with nobody listening.
func makeSocket(t *testing.T, path string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	l, err := net.Listen("unix", path)
	require.NoError(t, err)
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	require.NoError(t, l.Close())
}

// Markers in a tree's contents.
const (
	socketFile = "<socket>" // a unix socket
	dirEntry   = "<dir>"    // an empty directory
	linkTo     = "<link> "  // a symlink to the rest of the text
	rootMark   = "{root}"   // replaced by the tree's root directory
	bigSpec    = "<64k+1>"  // a spec file one byte over the limit
)

// tree describes files to build: path relative to the root → content.
type tree map[string]string

// build creates t under root.
func (tr tree) build(t *testing.T, root string) {
	t.Helper()
	paths := make([]string, 0, len(tr))
	for p := range tr {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		full := filepath.Join(root, p)
		content := strings.ReplaceAll(tr[p], rootMark, root)
		switch {
		case content == socketFile:
			makeSocket(t, full)
		case content == dirEntry:
			require.NoError(t, os.MkdirAll(full, 0o755))
		case content == bigSpec:
			writeFile(t, full, "tcp://h:1"+strings.Repeat(" ", maxSpecFileSize))
		case strings.HasPrefix(content, linkTo):
			require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
			require.NoError(t, os.Symlink(strings.TrimPrefix(content, linkTo), full))
		default:
			writeFile(t, full, content)
		}
	}
}

// testDirs are the directories of a built tree: sockets in run/, spec files
// in etc/ then usr/.
func testDirs(root string) Dirs {
	return Dirs{
		Sockets: []string{filepath.Join(root, "run")},
		Specs:   []string{filepath.Join(root, "etc"), filepath.Join(root, "usr")},
	}
}

func TestScanFindsEveryKindOfPlugin(t *testing.T) {
	root := tempDir(t)
	tree{
		"run/a.sock":              socketFile,
		"run/b/b.sock":            socketFile,
		"run/c.sock":              linkTo + "../elsewhere/c-real.sock",
		"elsewhere/c-real.sock":   socketFile,
		"run/notes.txt":           "not a plugin",
		"run/0123abcd/other.sock": socketFile, // a managed plugin's directory
		"run/plain":               socketFile, // no .sock extension
		"etc/d.spec":              "unix://{root}/elsewhere/d.sock\n",
		"etc/e.json":              `{"Name": "e", "Addr": "https://127.0.0.1:7000", "TLSConfig": {"CAFile": "/ca.pem"}}`,
		"etc/f/f.spec":            "https://plugins.example:8443",
		"etc/g.json":              `{"Addr": "unix:///x/g.sock"}`,
		"etc/h/h.json":            `{"Addr": "http://10.1.1.1"}`,
		"etc/README":              "ignored",
		"usr/i.spec":              "tcp://[::1]:9000",
		"usr/a.spec":              "tcp://shadowed:1", // a's socket wins
		"usr/d.json":              `{"Addr": "tcp://shadowed:1"}`,
	}.build(t, root)
	run, etc, usr := filepath.Join(root, "run"), filepath.Join(root, "etc"), filepath.Join(root, "usr")

	got, errs := Scan(testDirs(root))
	require.Empty(t, errs)
	require.Equal(t, []Candidate{
		{Name: "a", Kind: KindSocket, Source: run + "/a.sock", Addr: "unix://" + run + "/a.sock", SocketPath: run + "/a.sock"},
		{Name: "b", Kind: KindSocket, Source: run + "/b/b.sock", Addr: "unix://" + run + "/b/b.sock", SocketPath: run + "/b/b.sock"},
		{Name: "c", Kind: KindSocket, Source: run + "/c.sock", Addr: "unix://" + run + "/c.sock", SocketPath: run + "/c.sock"},
		{Name: "d", Kind: KindSpec, Source: etc + "/d.spec", Addr: "unix://" + root + "/elsewhere/d.sock", SocketPath: root + "/elsewhere/d.sock"},
		{Name: "e", Kind: KindJSON, Source: etc + "/e.json", Addr: "https://127.0.0.1:7000", TCPAddr: "127.0.0.1:7000", TLS: &TLSConfig{CAFile: "/ca.pem"}},
		{Name: "f", Kind: KindSpec, Source: etc + "/f/f.spec", Addr: "https://plugins.example:8443", TCPAddr: "plugins.example:8443", TLS: &TLSConfig{InsecureSkipVerify: true}},
		{Name: "g", Kind: KindJSON, Source: etc + "/g.json", Addr: "unix:///x/g.sock", SocketPath: "/x/g.sock"},
		{Name: "h", Kind: KindJSON, Source: etc + "/h/h.json", Addr: "http://10.1.1.1", TCPAddr: "10.1.1.1:80"},
		{Name: "i", Kind: KindSpec, Source: usr + "/i.spec", Addr: "tcp://[::1]:9000", TCPAddr: "[::1]:9000"},
	}, got)

	for _, c := range got {
		found, err := Lookup(testDirs(root), c.Name)
		require.NoError(t, err)
		require.Equal(t, c, found, "Lookup agrees with Scan for %s", c.Name)
	}
}

func TestLookupFollowsDockersPrecedence(t *testing.T) {
	tests := []struct {
		name   string
		files  tree
		dirs   func(root string) Dirs
		winner string // path of the winning file, relative to the root
	}{
		{
			name:   "a socket beats a spec file",
			files:  tree{"run/x.sock": socketFile, "etc/x.spec": "tcp://h:1"},
			winner: "run/x.sock",
		},
		{
			name:   "a top-level socket beats a nested one",
			files:  tree{"run/x.sock": socketFile, "run/x/x.sock": socketFile},
			winner: "run/x.sock",
		},
		{
			name:   "a spec file beats a json file in the same directory",
			files:  tree{"etc/x.spec": "tcp://h:1", "etc/x.json": `{"Addr": "tcp://h:2"}`},
			winner: "etc/x.spec",
		},
		{
			name:   "a nested spec file beats a top-level json file",
			files:  tree{"etc/x/x.spec": "tcp://h:1", "etc/x.json": `{"Addr": "tcp://h:2"}`},
			winner: "etc/x/x.spec",
		},
		{
			name:   "a top-level json file beats a nested one",
			files:  tree{"etc/x.json": `{"Addr": "tcp://h:1"}`, "etc/x/x.json": `{"Addr": "tcp://h:2"}`},
			winner: "etc/x.json",
		},
		{
			name:   "a json file in the first spec directory beats a spec file in the second",
			files:  tree{"etc/x.json": `{"Addr": "tcp://h:1"}`, "usr/x.spec": "tcp://h:2"},
			winner: "etc/x.json",
		},
		{
			name:   "a regular file named .sock is passed over, as in Docker",
			files:  tree{"run/x.sock": "stale", "etc/x.spec": "tcp://h:1"},
			winner: "etc/x.spec",
		},
		{
			name:   "a symlink loop is passed over, as in Docker",
			files:  tree{"run/x.sock": linkTo + "x.sock", "usr/x.spec": "tcp://h:1"},
			winner: "usr/x.spec",
		},
		{
			name:  "the second socket directory is searched after the first",
			files: tree{"run2/x.sock": socketFile, "etc/x.spec": "tcp://h:1"},
			dirs: func(root string) Dirs {
				d := testDirs(root)
				d.Sockets = append(d.Sockets, filepath.Join(root, "run2"))
				return d
			},
			winner: "run2/x.sock",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := tempDir(t)
			tt.files.build(t, root)
			dirs := testDirs(root)
			if tt.dirs != nil {
				dirs = tt.dirs(root)
			}
			c, err := Lookup(dirs, "x")
			require.NoError(t, err)
			require.Equal(t, filepath.Join(root, tt.winner), c.Source)

			all, errs := Scan(dirs)
			require.Empty(t, errs)
			require.Equal(t, []Candidate{c}, all)
		})
	}
}

func TestScanReportsEachBadPluginAlone(t *testing.T) {
	longName := strings.Repeat("n", MaxNameLen+1)
	tests := []struct {
		name    string
		files   tree
		plugin  string
		file    string // relative to the root; "" when the error names no file
		wantErr error
		errno   syscall.Errno
	}{
		{name: "a garbage spec file", files: tree{"etc/x.spec": "\x00\x01\x02 garbage"}, file: "etc/x.spec", wantErr: ErrBadSpec},
		{name: "a spec file without a URL", files: tree{"etc/x.spec": "hello world"}, file: "etc/x.spec", wantErr: ErrBadSpec},
		{name: "an empty spec file", files: tree{"etc/x.spec": ""}, file: "etc/x.spec", wantErr: ErrBadSpec},
		{name: "a spec file over 64 KiB", files: tree{"etc/x.spec": bigSpec}, file: "etc/x.spec", wantErr: ErrBadSpec},
		{name: "a spec file that is a directory", files: tree{"etc/x/x.spec": dirEntry}, file: "etc/x/x.spec", wantErr: ErrBadSpec},
		{name: "a bad URL scheme", files: tree{"etc/x.spec": "ftp://h:21"}, file: "etc/x.spec", wantErr: ErrBadScheme},
		{name: "a tcp URL without host", files: tree{"etc/x.spec": "tcp://"}, file: "etc/x.spec", wantErr: ErrBadAddress},
		{name: "a tcp URL without port", files: tree{"usr/x.spec": "tcp://localhost"}, file: "usr/x.spec", wantErr: ErrBadAddress},
		{name: "a relative unix address", files: tree{"etc/x.spec": "unix://x.sock"}, file: "etc/x.spec", wantErr: ErrBadAddress},
		{name: "a unix address over 107 bytes", files: tree{"etc/x.spec": "unix:///" + strings.Repeat("a", 110)}, file: "etc/x.spec", wantErr: ErrSocketPathTooLong},
		{name: "invalid JSON", files: tree{"etc/x.json": `{"Addr":`}, file: "etc/x.json", wantErr: ErrBadSpec},
		{name: "JSON with a number for Addr", files: tree{"etc/x.json": `{"Addr": 5}`}, file: "etc/x.json", wantErr: ErrBadSpec},
		{name: "JSON with a string for a boolean", files: tree{"etc/x/x.json": `{"Addr": "tcp://h:1", "TLSConfig": {"InsecureSkipVerify": "yes"}}`}, file: "etc/x/x.json", wantErr: ErrBadSpec},
		{name: "JSON without Addr", files: tree{"etc/x.json": `{"Name": "x"}`}, file: "etc/x.json", wantErr: ErrBadSpec},
		{name: "a socket path that is a regular file", files: tree{"run/x.sock": "not a socket"}, file: "run/x.sock", wantErr: ErrNotSocket},
		{name: "a socket path that is a directory", files: tree{"run/x.sock": dirEntry}, file: "run/x.sock", wantErr: ErrNotSocket},
		{name: "a symlink loop for a socket", files: tree{"run/x.sock": linkTo + "x.sock"}, file: "run/x.sock", wantErr: ErrUnreadable, errno: syscall.ELOOP},
		{name: "a symlink loop through two spec files", files: tree{"etc/x.spec": linkTo + "y.spec", "etc/y.spec": linkTo + "x.spec"}, file: "etc/x.spec", wantErr: ErrUnreadable, errno: syscall.ELOOP},
		{name: "a dangling symlink", files: tree{"run/x.sock": linkTo + "/nonexistent/x.sock"}, file: "run/x.sock", wantErr: ErrUnreadable},
		{name: "a name over 128 bytes", files: tree{"etc/" + longName + ".spec": "tcp://h:1"}, plugin: longName, file: "etc/" + longName + ".spec", wantErr: ErrInvalidName},
		{name: "a name that climbs out of the directory", files: tree{"etc/...spec": "tcp://h:1"}, plugin: "..", file: "etc/...spec", wantErr: ErrInvalidName},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := tempDir(t)
			tt.files.build(t, root)
			tree{"run/ok.sock": socketFile}.build(t, root)
			plugin := tt.plugin
			if plugin == "" {
				plugin = "x"
			}

			got, errs := Scan(testDirs(root))
			require.Len(t, got, 1, "the good plugin is still found")
			require.Equal(t, "ok", got[0].Name)
			// The symlink loop through two files breaks y as well as x.
			require.NotEmpty(t, errs)
			requirePluginError(t, errs[0], tt.wantErr, plugin, filepath.Join(root, tt.file))
			if tt.errno != 0 {
				require.ErrorIs(t, errs[0], tt.errno)
			}
			for _, err := range errs[1:] {
				require.NotContains(t, err.Error(), `plugin "ok"`)
			}
		})
	}
}

func TestScanReportsATooLongSocketPath(t *testing.T) {
	root := tempDir(t)
	name := strings.Repeat("s", MaxSocketPathLen-len(root+"/run/.sock")+1)
	// bind(2) cannot create a socket at a path that long: make it at a short
	// path and move it there.
	short := filepath.Join(root, "s.sock")
	makeSocket(t, short)
	long := filepath.Join(root, "run", name+".sock")
	require.NoError(t, os.MkdirAll(filepath.Dir(long), 0o755))
	require.NoError(t, os.Rename(short, long))
	require.Len(t, long, MaxSocketPathLen+1)

	got, errs := Scan(testDirs(root))
	require.Empty(t, got)
	require.Len(t, errs, 1)
	requirePluginError(t, errs[0], ErrSocketPathTooLong, name, long)
}

func TestScanCarriesOnPastBadDirectories(t *testing.T) {
	root := tempDir(t)
	tree{
		"run":        "a file where the socket directory should be",
		"usr/x.spec": "tcp://h:1",
	}.build(t, root)
	dirs := testDirs(root) // etc/ does not exist: skipped quietly
	dirs.Specs = append(dirs.Specs, "relative/dir")

	got, errs := Scan(dirs)
	require.Len(t, got, 1)
	require.Equal(t, "x", got[0].Name)
	require.Len(t, errs, 2)
	require.ErrorContains(t, errs[0], `plugin directory "relative/dir" is not an absolute path`)
	require.ErrorIs(t, errs[1], ErrUnreadable)
	require.ErrorIs(t, errs[1], syscall.ENOTDIR)
	require.ErrorContains(t, errs[1], filepath.Join(root, "run"))
}

func TestScanOfNothing(t *testing.T) {
	got, errs := Scan(Dirs{})
	require.Empty(t, got)
	require.Empty(t, errs)
}

func TestLookupRefusesBadNamesAndReportsMissingPlugins(t *testing.T) {
	root := tempDir(t)
	tree{"etc/passwd.spec": "tcp://h:1", "run/x.sock": socketFile}.build(t, root)
	dirs := testDirs(root)
	tests := []struct {
		name    string
		plugin  string
		dirs    Dirs
		wantErr error
	}{
		{"a path traversal", "../etc/passwd", dirs, ErrInvalidName},
		{"a nested path", "run/x", dirs, ErrInvalidName},
		{"the parent directory", "..", dirs, ErrInvalidName},
		{"an empty name", "", dirs, ErrInvalidName},
		{"a name over 128 bytes", strings.Repeat("x", MaxNameLen+1), dirs, ErrInvalidName},
		{"a plugin that is not there", "absent", dirs, ErrNotFound},
		{"a relative directory", "x", Dirs{Sockets: []string{"run"}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Lookup(tt.dirs, tt.plugin)
			require.Error(t, err)
			if tt.wantErr == nil {
				require.ErrorContains(t, err, "not an absolute path")
				return
			}
			require.ErrorIs(t, err, tt.wantErr)
			require.ErrorContains(t, err, fmt.Sprintf("plugin %q", tt.plugin))
		})
	}
}

func TestDockerDirs(t *testing.T) {
	require.Equal(t, Dirs{
		Sockets: []string{"/run/docker/plugins"},
		Specs:   []string{"/etc/docker/plugins", "/usr/lib/docker/plugins"},
	}, DockerDirs())
}

func ExampleScan() {
	candidates, errs := Scan(DockerDirs())
	for _, err := range errs {
		fmt.Println("skipped:", err)
	}
	for _, c := range candidates {
		fmt.Println(c.Name, c.Addr)
	}
}
