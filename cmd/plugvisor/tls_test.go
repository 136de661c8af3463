package main

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// makeTLS runs plugvisor tls in dir: a CA, etcd's certificate, one per
// node, and the CLI's.
func makeTLS(t *testing.T, dir string, nodes ...string) {
	t.Helper()
	runs := [][]string{{"tls", "ca", "create", "-dir", dir}, {"tls", "cert", "create", "-dir", dir, "-etcd"}, {"tls", "cert", "create", "-dir", dir, "-cli"}}
	for _, n := range nodes {
		runs = append(runs, []string{"tls", "cert", "create", "-dir", dir, "-agent", n})
	}
	for _, args := range runs {
		_, stderr, code := runHere(args...)
		require.Zero(t, code, "%s: %s", strings.Join(args, " "), stderr)
	}
}

func TestPlugvisorTLSWritesACAAndACertificatePerRoleWithTheirModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	stdout, stderr, code := runHere("tls", "ca", "create", "-dir", dir)
	require.Zero(t, code, stderr)
	require.Regexp(t, `^wrote .*/tls/ca\.pem: the CA "plugvisor CA [0-9a-f]{8}", valid until \d{4}-\d\d-\d\d\n`+
		`wrote .*/tls/ca-key\.pem: its key \(mode 0600\): keep it off the fleet's hosts, as it signs every certificate\n$`, stdout)
	stdout, stderr, code = runHere("tls", "cert", "create", "-dir", dir, "-agent", "n1", "-ip", "10.0.0.5", "-dns", "n1.example.com", "-days", "30")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "agent-n1.pem: agent n1's certificate (server and client use; localhost, n1.example.com, 127.0.0.1, ::1, 10.0.0.5), valid until")
	stdout, stderr, code = runHere("tls", "cert", "create", "-dir", dir, "-cli")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "cli.pem: the CLI's certificate (client use), valid until")
	stdout, stderr, code = runHere("tls", "cert", "create", "-dir", dir, "-etcd")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "etcd.pem: etcd's certificate (server and client use; localhost, 127.0.0.1, ::1), valid until")

	for name, mode := range map[string]os.FileMode{"ca.pem": 0o644, "ca-key.pem": 0o600, "etcd.pem": 0o644, "etcd-key.pem": 0o600,
		"agent-n1.pem": 0o644, "agent-n1-key.pem": 0o600, "cli.pem": 0o644, "cli-key.pem": 0o600} {
		info, err := os.Stat(filepath.Join(dir, name))
		require.NoError(t, err)
		require.Equal(t, mode, info.Mode(), name)
	}

	// Each certificate loads with its key and chains to the CA.
	pem, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(pem))
	for name, usage := range map[string]x509.ExtKeyUsage{"etcd": x509.ExtKeyUsageServerAuth, "agent-n1": x509.ExtKeyUsageServerAuth, "cli": x509.ExtKeyUsageClientAuth} {
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem"))
		require.NoError(t, err, name)
		_, err = pair.Leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}})
		require.NoError(t, err, name)
	}
}

func TestPlugvisorTLSNeverOverwritesAndRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	makeTLS(t, dir, "n1")
	key, err := os.ReadFile(filepath.Join(dir, "ca-key.pem"))
	require.NoError(t, err)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"tls", "ca", "create", "-dir", dir}, 1, "ca.pem: file exists: nothing was written; move it aside, or give another -dir"},
		{[]string{"tls", "cert", "create", "-dir", dir, "-agent", "n1"}, 1, "agent-n1.pem: file exists"},
		{[]string{"tls", "cert", "create", "-dir", dir}, 2, "give one of -etcd, -agent NODE or -cli"},
		{[]string{"tls", "cert", "create", "-dir", dir, "-etcd", "-cli"}, 2, "give one of -etcd, -agent NODE or -cli"},
		{[]string{"tls", "cert", "create", "-dir", dir, "-agent", "n/2"}, 2, "node ID"},
		{[]string{"tls", "cert", "create", "-dir", dir, "-agent", "n2", "-ip", "n2.example.com"}, 2, `-ip "n2.example.com" is not an IP address`},
		{[]string{"tls", "cert", "create", "-dir", dir, "-agent", "n2", "-dns", "bad name"}, 2, `DNS name "bad name"`},
		{[]string{"tls", "cert", "create", "-dir", dir, "-cli", "-dns", "x.example.com"}, 2, "-cli makes a client's certificate, which names no host"},
		{[]string{"tls", "cert", "create", "-dir", dir, "-agent", "n2", "-days", "0"}, 2, "-days 0: give a number of days, 1 or more"},
		{[]string{"tls", "cert", "create", "-dir", dir, "-agent", "n2", "-days", "2000"}, 2, "-days 2000: the certificate would outlive its CA, which expires on"},
		{[]string{"tls", "ca", "create", "-dir", t.TempDir(), "-days", "-1"}, 2, "-days -1"},
		{[]string{"tls", "cert", "create", "-dir", t.TempDir(), "-agent", "n2"}, 1, "ca.pem: no such file or directory"},
		{[]string{"tls", "cert", "create", "-dir", dir, "-agent", "n2", "-ca-key", filepath.Join(dir, "cli-key.pem")}, 1, "is not the key of the CA"},
	} {
		t.Run(strings.Join(c.args[3:], " "), func(t *testing.T) {
			stdout, stderr, code := runHere(c.args...)
			require.Equal(t, c.code, code, stderr)
			require.Contains(t, stderr, c.want)
			require.Empty(t, stdout)
		})
	}
	after, err := os.ReadFile(filepath.Join(dir, "ca-key.pem"))
	require.NoError(t, err)
	require.Equal(t, key, after, "the CA's key is the same")
	require.NoFileExists(t, filepath.Join(dir, "agent-n2.pem"), "nothing was written for a refused request")
}
