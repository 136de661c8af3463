package version

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGetPrefersWhatTheLinkerSet(t *testing.T) {
	oldV, oldC := Version, Commit
	t.Cleanup(func() { Version, Commit = oldV, oldC })
	Version, Commit = "v9.8.7", "abc123"

	info := Get()

	require.Equal(t, Info{Version: "v9.8.7", Commit: "abc123", GoVersion: runtime.Version()}, info)
	require.Equal(t, "plugvisor v9.8.7 (commit abc123, "+runtime.Version()+")", info.String())
}

func TestGetNeverLeavesAFieldEmpty(t *testing.T) {
	oldV, oldC := Version, Commit
	t.Cleanup(func() { Version, Commit = oldV, oldC })
	Version, Commit = "", ""

	info := Get()

	require.NotEmpty(t, info.Version)
	require.NotEmpty(t, info.Commit)
	require.Equal(t, runtime.Version(), info.GoVersion)
}

func TestWithoutLinkerFlagsTheBuildInformationNamesTheBuild(t *testing.T) {
	stamped := func(version string, settings ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/plugvisor/plugvisor", Version: version}}
		for i := 0; i < len(settings); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return bi
	}
	for _, tc := range []struct {
		name                 string
		bi                   *debug.BuildInfo
		wantVersion, wantRev string
	}{
		{"go install of a release", stamped("v0.1.0"), "v0.1.0", "unknown"},
		{"a clean checkout", stamped("v0.1.1-0.20261126001509-20dcb8056e7a", "vcs.revision", "20dcb80", "vcs.modified", "false"),
			"v0.1.1-0.20261126001509-20dcb8056e7a", "20dcb80"},
		{"a checkout with changes", stamped("v0.0.0-20261126001509-20dcb8056e7a+dirty", "vcs.revision", "20dcb80", "vcs.modified", "true"),
			"v0.0.0-20261126001509-20dcb8056e7a+dirty", "20dcb80-dirty"},
		{"a build without VCS stamps", stamped("(devel)"), Release + "+devel", "unknown"},
		{"no build information at all", nil, Release + "+devel", "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info := fromBuild("", "", tc.bi)
			require.Equal(t, Info{Version: tc.wantVersion, Commit: tc.wantRev, GoVersion: runtime.Version()}, info)
		})
	}
}

// The two ways a real binary learns its build, each built and run: the
// linker flags `make build` passes, and the VCS stamps `go build` writes in
// a git checkout. The program is built in a module of its own, in a git
// repository of its own, which uses this package through a replace.

func TestABinaryLinkedWithTheVersionReportsIt(t *testing.T) {
	dir := printerModule(t)
	out := buildAndRun(t, dir, "-ldflags", "-X github.com/plugvisor/plugvisor/version.Version=v0.1.0-3-gabcdef1 "+
		"-X github.com/plugvisor/plugvisor/version.Commit=abcdef1234")
	require.Equal(t, "plugvisor v0.1.0-3-gabcdef1 (commit abcdef1234, "+runtime.Version()+")", out)
}

func TestABinaryBuiltInACheckoutReportsItsCommit(t *testing.T) {
	dir := printerModule(t)
	git(t, dir, "init", "-q")
	git(t, dir, "add", ".")
	git(t, dir, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "printer")
	head := git(t, dir, "rev-parse", "HEAD")

	out := buildAndRun(t, dir, "-buildvcs=true")
	require.Contains(t, out, "(commit "+head+", ")
	require.NotContains(t, out, "plugvisor devel ")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "changed.txt"), []byte("x"), 0o600))
	out = buildAndRun(t, dir, "-buildvcs=true")
	require.Contains(t, out, "(commit "+head+"-dirty, ")
}

// TestABinaryBuiltWithoutVCSReportsTheReleaseItFollows builds as `go
// install ./cmd/plugvisor` does where Go stamps nothing (a tree outside
// git, or -buildvcs=false): the binary names the release, not "devel".
func TestABinaryBuiltWithoutVCSReportsTheReleaseItFollows(t *testing.T) {
	dir := printerModule(t)
	out := buildAndRun(t, dir, "-buildvcs=false")
	require.Equal(t, "plugvisor "+Release+"+devel (commit unknown, "+runtime.Version()+")", out)
}

// printerModule writes a module whose program prints Get().String().
func printerModule(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/printer\n\ngo 1.26\n\nrequire github.com/plugvisor/plugvisor v0.0.0\n\n" +
			"replace github.com/plugvisor/plugvisor => " + root + "\n",
		"main.go": "package main\n\nimport (\n\t\"fmt\"\n\n\t\"github.com/plugvisor/plugvisor/version\"\n)\n\n" +
			"func main() { fmt.Println(version.Get()) }\n",
		"go.sum": string(sum),
	}
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600))
	}
	run(t, goCommand(dir, "mod", "tidy"))
	return dir
}

// goCommand runs go in dir on the module cache alone: no network.
func goCommand(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOPROXY=off", "GOSUMDB=off")
	return cmd
}

func run(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%v: %s", cmd.Args, out)
	return strings.TrimSpace(string(out))
}

func buildAndRun(t *testing.T, dir string, flags ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "printer")
	run(t, goCommand(dir, append(append([]string{"build", "-o", bin}, flags...), ".")...))
	return run(t, exec.Command(bin))
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	return run(t, cmd)
}
