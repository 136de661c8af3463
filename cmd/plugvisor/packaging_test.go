package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/version"
)

// versionRelease is the release this source is.
const versionRelease = version.Release

// unitFile is the systemd unit the release ships.
const unitFile = "../../packaging/systemd/plugvisor.service"

// lookTool finds a tool a test needs. Where it is missing the test skips,
// saying how to install it; under CI (CI=true), whose .ci/run installs it,
// it fails instead.
func lookTool(t *testing.T, name, install string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is missing under CI: .ci/run installs it (%s)", name, install)
	}
	t.Skipf("%s is missing: %s to run this test", name, install)
	return ""
}

// TestTheSystemdUnitVerifies runs systemd-analyze verify on the unit, its
// ExecStart pointed at the binary the tests built: any warning (an
// unknown key, a bad value, a missing binary) fails the test.
func TestTheSystemdUnitVerifies(t *testing.T) {
	analyze := lookTool(t, "systemd-analyze", "apt-get install systemd")
	unit, err := os.ReadFile(unitFile)
	require.NoError(t, err)
	require.Contains(t, string(unit), "/usr/local/bin/plugvisor agent -config /etc/plugvisor")
	dir := t.TempDir()
	path := filepath.Join(dir, "plugvisor.service")
	require.NoError(t, os.WriteFile(path, bytes.ReplaceAll(unit, []byte("/usr/local/bin/plugvisor"), []byte(binary)), 0o644))
	// The man page is installed by make install, not here.
	out, err := exec.Command(analyze, "verify", "--man=no", path).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Empty(t, strings.TrimSpace(string(out)), "systemd-analyze verify warns")
}

// TestTheSystemdUnitKeepsTheHostsMountNamespace checks that no option of
// the unit gives the agent a mount namespace of its own: mounts and
// unmounts must propagate between the agent, its plugins and the host.
func TestTheSystemdUnitKeepsTheHostsMountNamespace(t *testing.T) {
	unit, err := os.ReadFile(unitFile)
	require.NoError(t, err)
	for _, line := range strings.Split(string(unit), "\n") {
		key, _, ok := strings.Cut(line, "=")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		for _, namespaced := range []string{"PrivateMounts", "PrivateTmp", "PrivateDevices", "ProtectSystem", "ProtectHome",
			"ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups", "ProtectProc",
			"ReadOnlyPaths", "InaccessiblePaths", "TemporaryFileSystem", "BindPaths", "MountFlags", "RootDirectory"} {
			require.NotEqual(t, namespaced, key, "the unit sets %s, which gives the agent a mount namespace of its own", key)
		}
	}
	require.Contains(t, string(unit), "Type=notify\n")
	require.Contains(t, string(unit), "CAP_SYS_ADMIN")
}

// repoRoot is the repository's top directory, where the Makefile is.
const repoRoot = "../.."

// runMake runs make in the repository with args and returns its output.
func runMake(t *testing.T, args ...string) string {
	t.Helper()
	mk := lookTool(t, "make", "apt-get install make")
	cmd := exec.Command(mk, append([]string{"--no-print-directory", "-C", repoRoot}, args...)...)
	cmd.Env = append(os.Environ(), "MAKEFLAGS=")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "make %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

// TestMakeHelpListsEveryTargetAligned checks that make help names every
// target of the Makefile, each with its description, in one column.
func TestMakeHelpListsEveryTargetAligned(t *testing.T) {
	makefile, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	require.NoError(t, err)
	var targets []string
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z-]*):( |$)`).FindAllStringSubmatch(string(makefile), -1) {
		if !slices.Contains(targets, m[1]) {
			targets = append(targets, m[1])
		}
	}
	require.Greater(t, len(targets), 20)
	help := strings.Split(strings.TrimRight(runMake(t, "help"), "\n"), "\n")
	column := -1
	var listed []string
	for _, line := range help {
		m := regexp.MustCompile(`^  make ([a-z-]+)( +)\S`).FindStringSubmatchIndex(line)
		require.NotNil(t, m, "a line of make help that names no target: %q", line)
		listed = append(listed, line[m[2]:m[3]])
		if column < 0 {
			column = m[5]
		}
		require.Equal(t, column, m[5], "the descriptions start in one column: %q", line)
	}
	require.ElementsMatch(t, targets, listed, "make help lists every target, once")
}

// TestMakeInstallPutsEverythingInPlace runs make install into a DESTDIR,
// with the binary the tests built as make build's.
func TestMakeInstallPutsEverythingInPlace(t *testing.T) {
	dest := t.TempDir()
	out := runMake(t, "install", "DESTDIR="+dest, "PREFIX=/opt/pv", "BIN="+filepath.Dir(binary))
	require.Contains(t, out, "installed "+dest+"/opt/pv/bin/plugvisor")
	for path, mode := range map[string]os.FileMode{
		"opt/pv/bin/plugvisor":                      0o755,
		"opt/pv/share/man/man1/plugvisor-agent.1":   0o644,
		"opt/pv/share/man/man1/plugvisor-volumes.1": 0o644,
		"etc/systemd/system/plugvisor.service":      0o644,
		"etc/plugvisor/agent.hcl":                   0o600,
		"etc/plugvisor":                             0o700 | os.ModeDir,
	} {
		info, err := os.Stat(filepath.Join(dest, path))
		require.NoError(t, err)
		require.Equal(t, mode, info.Mode(), path)
	}
	unit, err := os.ReadFile(filepath.Join(dest, "etc/systemd/system/plugvisor.service"))
	require.NoError(t, err)
	require.Contains(t, string(unit), "ExecStart=/opt/pv/bin/plugvisor agent -config /etc/plugvisor\n", "the unit runs the binary where PREFIX put it")

	// A second install keeps the operator's config.
	config := filepath.Join(dest, "etc/plugvisor/agent.hcl")
	require.NoError(t, os.WriteFile(config, []byte("log_level = \"debug\"\n"), 0o600))
	out = runMake(t, "install", "DESTDIR="+dest, "PREFIX=/opt/pv", "BIN="+filepath.Dir(binary))
	require.Contains(t, out, "kept "+config)
	kept, err := os.ReadFile(config)
	require.NoError(t, err)
	require.Equal(t, "log_level = \"debug\"\n", string(kept))
}

// TestMakeReleaseBuildsATarballWhoseBinaryReportsItsVersion runs make
// release for this machine's arch (the release script itself checks the
// sums, the files and the version the binary reports), then checks the
// tarball from outside.
func TestMakeReleaseBuildsATarballWhoseBinaryReportsItsVersion(t *testing.T) {
	version := strings.TrimPrefix(versionRelease, "v")
	dir := t.TempDir()
	arch := runtime.GOARCH
	out := runMake(t, "release", "VERSION="+version, "ARCHS="+arch, "RELEASE_DIR="+dir)
	name := "plugvisor-" + version + "-linux-" + arch
	require.Contains(t, out, "release: the "+arch+" binary reports: plugvisor "+versionRelease+" (commit ")

	sums, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	require.NoError(t, err)
	require.Regexp(t, `^[0-9a-f]{64}  `+regexp.QuoteMeta(name)+`\.tar\.gz\n$`, string(sums))
	tarball := filepath.Join(dir, name+".tar.gz")
	unpacked := t.TempDir()
	require.NoError(t, exec.Command("tar", "-C", unpacked, "-xzf", tarball).Run())
	got, err := exec.Command(filepath.Join(unpacked, name, "plugvisor"), "version").Output()
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(got), "plugvisor "+versionRelease+" (commit "), string(got))
	for _, f := range []string{"LICENSE", "README.md", "CHANGELOG.md", "agent.hcl", "systemd/plugvisor.service",
		"man/man1/plugvisor.1", "man/man1/plugvisor-tokens.1"} {
		require.FileExists(t, filepath.Join(unpacked, name, f))
	}

	// A version that is not the source's release is refused, naming the fix.
	mk := lookTool(t, "make", "apt-get install make")
	cmd := exec.Command(mk, "--no-print-directory", "-C", repoRoot, "release", "VERSION=9.9.9", "ARCHS="+arch, "RELEASE_DIR="+t.TempDir())
	refused, err := cmd.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(refused), `version/version.go says Release = "`+versionRelease+`": set it to "v9.9.9" first`)
}
