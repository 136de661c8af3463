package main

import (
	"bufio"
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// loopbackURL is an https URL on a loopback port free a moment ago.
func loopbackURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, l.Close())
	return "https://" + l.Addr().String()
}

// startEtcd runs `plugvisor etcd` on dir with the certificates of tlsDir
// (made by makeTLS) until it is ready; the returned func stops it
// (SIGTERM), and so does the test's end.
func startEtcd(t *testing.T, dir, tlsDir, client, peer string) func() {
	t.Helper()
	return startEtcdArgs(t, "-data-dir", dir, "-listen", client, "-peer", peer,
		"-ca", filepath.Join(tlsDir, "ca.pem"), "-cert", filepath.Join(tlsDir, "etcd.pem"), "-key", filepath.Join(tlsDir, "etcd-key.pem"))
}

// startEtcdArgs runs `plugvisor etcd ARGS...` until it is ready.
func startEtcdArgs(t *testing.T, args ...string) func() {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"etcd"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
	}
	t.Cleanup(stop)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, line, "etcd ready")
	return stop
}

// etcdClient is a client of endpoint with the CLI's certificate of tlsDir.
func etcdClient(t *testing.T, endpoint, tlsDir string) *clientv3.Client {
	t.Helper()
	cfg, err := tlsPair("etcd", filepath.Join(tlsDir, "ca.pem"), filepath.Join(tlsDir, "cli.pem"), filepath.Join(tlsDir, "cli-key.pem"), false)
	require.NoError(t, err)
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: cfg, DialTimeout: time.Minute, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestAnOperatorBacksUpDefragmentsAndRestoresTheFleetsEtcd runs the
// commands of docs/fleet-operations.md: a snapshot of a live plugvisor
// etcd, a defragmentation, and a restore into a new data directory that
// plugvisor etcd then serves with the fleet's keys; each with the
// certificates plugvisor tls made.
func TestAnOperatorBacksUpDefragmentsAndRestoresTheFleetsEtcd(t *testing.T) {
	dir := t.TempDir()
	tlsDir := filepath.Join(dir, "tls")
	makeTLS(t, tlsDir)
	client, peer := loopbackURL(t), loopbackURL(t)
	stop := startEtcd(t, filepath.Join(dir, "etcd"), tlsDir, client, peer)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := etcdClient(t, client, tlsDir).Put(ctx, "/plugvisor/volumes/default/db", "the volume")
	require.NoError(t, err)

	certs := []string{"-etcd-ca", filepath.Join(tlsDir, "ca.pem"), "-etcd-cert", filepath.Join(tlsDir, "cli.pem"), "-etcd-key", filepath.Join(tlsDir, "cli-key.pem")}
	file := filepath.Join(dir, "fleet.db")
	stdout, stderr, code := cli(t, append(append([]string{"etcd", "snapshot", "save", "-endpoints", client}, certs...), file)...)
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "saved a snapshot of")
	stdout, stderr, code = cli(t, append([]string{"etcd", "defrag", "-endpoints", client}, certs...)...)
	require.Zero(t, code, stderr)
	require.Regexp(t, `db \d+ bytes before, \d+ after`, stdout)
	_, stderr, code = cli(t, "etcd", "defrag", "-endpoints", client, "-etcd-ca", filepath.Join(tlsDir, "ca.pem"), "-timeout", "3s")
	require.Equal(t, 1, code, "without the CLI's certificate")
	require.Contains(t, stderr, "context deadline exceeded")
	stop()

	_, stderr, code = cli(t, "etcd", "snapshot", "restore", file)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "-data-dir is required")
	restored, client2, peer2 := filepath.Join(dir, "restored"), loopbackURL(t), loopbackURL(t)
	stdout, stderr, code = cli(t, "etcd", "snapshot", "restore", file, "-data-dir", restored, "-peer", peer2)
	require.Zero(t, code, stderr)
	require.True(t, strings.HasPrefix(stdout, "restored "), stdout)
	startEtcd(t, restored, tlsDir, client2, peer2)
	resp, err := etcdClient(t, client2, tlsDir).Get(ctx, "/plugvisor/volumes/default/db")
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	require.Equal(t, "the volume", string(resp.Kvs[0].Value))
}

// TestTheEtcdCommandsRefuseBadInputBeforeAnyRequest: a snapshot without
// its file, and a restore without its data directory, are usage errors.
func TestTheEtcdCommandsRefuseBadInputBeforeAnyRequest(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"etcd", "snapshot", "save"}, "save needs FILE, e.g. plugvisor etcd snapshot save /backup/fleet.db"},
		{[]string{"etcd", "snapshot", "restore", "fleet.db"}, "-data-dir is required: the new data directory"},
		{[]string{"etcd", "snapshot", "restore", "fleet.db", "-data-dir", "d", "-peer", "http://10.1.2.3:2380"}, "loopback"},
		{[]string{"etcd", "defrag", "-endpoints", "http://10.1.2.3:2379"}, "-endpoints http://10.1.2.3:2379 is plain HTTP off this host"},
		{[]string{"etcd", "snapshot", "save", "-endpoints", "http://127.0.0.1:2379,https://10.1.2.3:2379", "f.db"}, "-endpoints mixes plain and TLS URLs"},
	} {
		stdout, stderr, code := runHere(tc.args...)
		require.NotZero(t, code, strings.Join(tc.args, " "))
		require.Contains(t, stderr, tc.want)
		require.Empty(t, stdout)
	}
	require.NoDirExists(t, "d", "nothing was restored")
}
