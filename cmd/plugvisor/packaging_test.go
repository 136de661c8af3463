package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

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
