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

// loopbackURL is an http URL on a loopback port free a moment ago.
func loopbackURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, l.Close())
	return "http://" + l.Addr().String()
}

// startEtcd runs `plugvisor etcd` on dir until it is ready; the returned
// func stops it (SIGTERM), and so does the test's end.
func startEtcd(t *testing.T, dir, client, peer string) func() {
	t.Helper()
	cmd := exec.Command(binary, "etcd", "-data-dir", dir, "-listen", client, "-peer", peer)
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

// TestAnOperatorBacksUpDefragmentsAndRestoresTheFleetsEtcd runs the
// commands of docs/fleet-operations.md: a snapshot of a live plugvisor
// etcd, a defragmentation, and a restore into a new data directory that
// plugvisor etcd then serves with the fleet's keys.
func TestAnOperatorBacksUpDefragmentsAndRestoresTheFleetsEtcd(t *testing.T) {
	dir := t.TempDir()
	client, peer := loopbackURL(t), loopbackURL(t)
	stop := startEtcd(t, filepath.Join(dir, "etcd"), client, peer)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	put := func(endpoint string) *clientv3.Client {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: time.Minute, Logger: zap.NewNop()})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	_, err := put(client).Put(ctx, "/plugvisor/volumes/default/db", "the volume")
	require.NoError(t, err)

	file := filepath.Join(dir, "fleet.db")
	stdout, stderr, code := cli(t, "etcd", "snapshot", "save", "-endpoints", client, file)
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "saved a snapshot of")
	stdout, stderr, code = cli(t, "etcd", "defrag", "-endpoints", client)
	require.Zero(t, code, stderr)
	require.Regexp(t, `db \d+ bytes before, \d+ after`, stdout)
	stop()

	_, stderr, code = cli(t, "etcd", "snapshot", "restore", file)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "-data-dir is required")
	restored, client2, peer2 := filepath.Join(dir, "restored"), loopbackURL(t), loopbackURL(t)
	stdout, stderr, code = cli(t, "etcd", "snapshot", "restore", file, "-data-dir", restored, "-peer", peer2)
	require.Zero(t, code, stderr)
	require.True(t, strings.HasPrefix(stdout, "restored "), stdout)
	startEtcd(t, restored, client2, peer2)
	resp, err := put(client2).Get(ctx, "/plugvisor/volumes/default/db")
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
	} {
		stdout, stderr, code := runHere(tc.args...)
		require.NotZero(t, code, strings.Join(tc.args, " "))
		require.Contains(t, stderr, tc.want)
		require.Empty(t, stdout)
	}
	require.NoDirExists(t, "d", "nothing was restored")
}
