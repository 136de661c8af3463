package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/internal/errwalk"
)

// TestTheCLIsRefusalsSayEachThingOnce walks the main refusals of the CLI
// against a running agent: each fails with exit code 1 and one line that
// says each thing once (internal/errwalk), the command's name its only
// prefix.
func TestTheCLIsRefusalsSayEachThingOnce(t *testing.T) {
	dir := dataDir(t)
	startAgent(t, dir)
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"a socket path that is a file", []string{"plugin", "register", "-type", "csi-node", "-name", "p", "-alloc", "a1", "-socket", file},
			"plugvisor plugin register: invalid argument: socket path"},
		{"an unknown allocation", []string{"plugin", "deregister", "csi-node", "q", "a1"}, "plugvisor plugin deregister: not found"},
		{"an unknown plugin", []string{"plugin", "status", "csi-node", "q"}, "plugvisor plugin status: not found"},
		{"a mount of an unknown volume", []string{"volume", "mount", "v1", "a1"}, "plugvisor volume mount: volume not found"},
		{"a claim of an unknown volume", []string{"volume", "claim", "v1", "a1"}, "plugvisor volume claim: volume not found"},
		{"the status of an unknown volume", []string{"volume", "status", "v1"}, "plugvisor volume status: volume not found"},
		{"a volume with an unknown access mode", []string{"volume", "register", "-id", "v2", "-plugin", "hostpath", "-access-mode", "bogus"},
			`plugvisor volume register: -access-mode "bogus": want one of single-node-reader-only`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, code := cli(t, append(c.args, "-data-dir", dir)...)
			require.NotEqual(t, 0, code, stderr)
			// A usage error's "see: ... -h" line is a pointer, not the error.
			msg, _, _ := strings.Cut(strings.TrimSpace(stderr), "\nsee: ")
			require.Contains(t, msg, c.want)
			require.Empty(t, errwalk.Repeated(msg), "%q says a thing twice", msg)
		})
	}
}
