package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/plugvisor/plugvisor/actors/probe"
)

// runFor runs plugvisor with args for at most limit, and returns its
// stdout, stderr and exit code (-1 when it was still running).
func runFor(t *testing.T, limit time.Duration, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		return stdout.String(), stderr.String(), -1
	}
	code := 0
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return stdout.String(), stderr.String(), code
}

// TestPlugvisorEtcdServesTLSUnlessToldInsecureOnLoopback: plugvisor etcd
// as the walkthrough used to run it (plain HTTP, no flag saying so) is
// refused before it writes anything; -insecure serves plain HTTP on
// loopback only, with a warning; TLS wants https URLs.
func TestPlugvisorEtcdServesTLSUnlessToldInsecureOnLoopback(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "etcd")
	plain := func() string { return strings.Replace(loopbackURL(t), "https://", "http://", 1) }
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"plain HTTP, not asked for", []string{"-listen", plain(), "-peer", plain()},
			"plugvisor etcd serves TLS with client certificates: give -ca, -cert, -key (plugvisor tls ca create, then plugvisor tls cert create -etcd, make them), or -insecure"},
		{"no flags at all", nil, "give -ca, -cert, -key"},
		{"TLS on an http URL", []string{"-listen", plain(), "-ca", "ca.pem", "-cert", "etcd.pem", "-key", "etcd-key.pem"},
			"plugvisor etcd serves TLS: give https://HOST:PORT (http:// only with -insecure, on loopback)"},
		{"-insecure with certificates", []string{"-insecure", "-cert", "etcd.pem"}, "-insecure serves plain HTTP, so it takes no -cert"},
		{"-insecure on an https URL", []string{"-insecure", "-listen", loopbackURL(t)}, "-insecure serves plain HTTP: give http://127.0.0.1:PORT"},
	} {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr, code := runFor(t, 30*time.Second, append([]string{"etcd", "-data-dir", data}, c.args...)...)
			require.Equal(t, 2, code, "plugvisor etcd %v ran: %s%s", c.args, stdout, stderr)
			require.Contains(t, stderr, c.want)
			require.NoDirExists(t, data, "nothing was written")
		})
	}
	_, stderr, code := runFor(t, 30*time.Second, "etcd", "-data-dir", data, "-insecure", "-listen", "http://0.0.0.0:2379")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "etcd without TLS listens on loopback only")
	require.NoDirExists(t, data)

	cmd := exec.Command(binary, "etcd", "-data-dir", data, "-insecure", "-listen", plain(), "-peer", plain())
	var errOut probe.LogBuffer
	cmd.Stderr = &errOut
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, line, "plain HTTP on loopback, for trying a fleet")
	require.Eventually(t, func() bool {
		return strings.Contains(errOut.String(), "INSECURE: plugvisor etcd -insecure serves plain HTTP without client certificates on http://127.0.0.1:")
	}, time.Minute, 10*time.Millisecond, "warned at every start: %s", &errOut)
}

// TestPlugvisorEtcdServesOnlyClientsWithACertificateOfItsCA is the attack
// of issue 39 on the fleet's etcd: a local process without a certificate
// of the fleet's CA reads no volume secret and writes no claim, by gRPC or
// by etcd's HTTP API; the CLI's certificate reads and writes.
func TestPlugvisorEtcdServesOnlyClientsWithACertificateOfItsCA(t *testing.T) {
	dir := t.TempDir()
	tlsDir, stranger := filepath.Join(dir, "tls"), filepath.Join(dir, "stranger")
	makeTLS(t, tlsDir)
	makeTLS(t, stranger)
	client := loopbackURL(t)
	startEtcd(t, filepath.Join(dir, "etcd"), tlsDir, client, loopbackURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const key = "/plugvisor/volumes/default/db"
	operator := etcdClient(t, client, tlsDir)
	_, err := operator.Put(ctx, key, `{"secrets":{"password":"hunter2"}}`)
	require.NoError(t, err)

	noCert, err := tlsPair("etcd", filepath.Join(tlsDir, "ca.pem"), "", "", true)
	require.NoError(t, err)
	otherCA, err := tlsPair("etcd", filepath.Join(tlsDir, "ca.pem"), filepath.Join(stranger, "cli.pem"), filepath.Join(stranger, "cli-key.pem"), false)
	require.NoError(t, err)
	for name, cfg := range map[string]*tls.Config{"without a certificate": noCert, "with another CA's certificate": otherCA} {
		t.Run(name, func(t *testing.T) {
			c, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, TLS: cfg, Logger: zap.NewNop()})
			require.NoError(t, err)
			defer func() { _ = c.Close() }()
			short, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			_, err = c.Get(short, "/plugvisor/", clientv3.WithPrefix())
			require.Error(t, err, "it reads nothing")
			_, err = c.Put(short, key, `{"claims":"forged"}`)
			require.Error(t, err, "it writes nothing")
			_, err = c.Delete(short, "/plugvisor/", clientv3.WithPrefix())
			require.Error(t, err, "it erases nothing")
		})
	}
	t.Run("over etcd's HTTP API in plain HTTP", func(t *testing.T) {
		url := strings.Replace(client, "https://", "http://", 1) + "/v3/kv/range"
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Post(url, "application/json", strings.NewReader(`{"key":"L3BsdWd2aXNvci8=","range_end":"L3BsdWd2aXNvcjA="}`))
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			require.NotEqual(t, http.StatusOK, resp.StatusCode, "%s", body)
			require.NotContains(t, string(body), "aHVudGVyMg", "the secret, base64")
		}
	})
	resp, err := operator.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, `{"secrets":{"password":"hunter2"}}`, string(resp.Kvs[0].Value), "nothing was forged")
}

// TestAnAgentRefusesAPlainEtcdOffThisHostAndTakesItsPasswordFromAFile:
// -cluster-etcd http:// on another host is refused naming the flag and the
// remedy, before anything starts; the etcd password comes from a file of
// mode 0600, never from a flag or a config key, and never shows.
func TestAnAgentRefusesAPlainEtcdOffThisHostAndTakesItsPasswordFromAFile(t *testing.T) {
	dir := t.TempDir()
	const password = "s3cret-etcd-password"
	secret := filepath.Join(dir, "etcd-password")
	require.NoError(t, os.WriteFile(secret, []byte(password+"\n"), 0o600))
	open := filepath.Join(dir, "open-password")
	require.NoError(t, os.WriteFile(open, []byte(password+"\n"), 0o644))
	config := filepath.Join(dir, "agent.hcl")
	require.NoError(t, os.WriteFile(config, []byte(`cluster_etcd_password = "`+password+`"`+"\n"), 0o600))
	base := []string{"agent", "-data-dir", filepath.Join(dir, "data"), "-validate", "-cluster-address", "127.0.0.1:7946", "-cluster-insecure"}
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"plain HTTP on another host", []string{"-cluster-etcd", "http://10.0.0.2:2379"}, 1,
			"Cluster.Etcd (-cluster-etcd) http://10.0.0.2:2379 is reached without TLS off this host, where anyone on the network could read the fleet's secrets and forge its claims: " +
				"give https:// URLs with -cluster-etcd-ca, -cluster-etcd-cert and -cluster-etcd-key (plugvisor tls makes them)"},
		{"plain HTTP first, TLS after", []string{"-cluster-etcd", "http://127.0.0.1:2379,https://10.0.0.2:2379"}, 1, "mixes plain and TLS URLs"},
		{"a user without a password", []string{"-cluster-etcd", "https://10.0.0.2:2379", "-cluster-etcd-username", "plugvisor"}, 2,
			"-cluster-etcd-username and -cluster-etcd-password-file go together"},
		{"a password file others may read", []string{"-cluster-etcd", "https://10.0.0.2:2379", "-cluster-etcd-username", "plugvisor", "-cluster-etcd-password-file", open}, 2,
			"has mode 0644, so others may read the password; run chmod 600"},
		{"a password inline in the config", []string{"-cluster-etcd", "https://10.0.0.2:2379", "-config", config}, 2,
			`unknown key "cluster_etcd_password"; passwords are never given inline: cluster_etcd_password_file names the file that holds it (mode 0600)`},
		{"a password on the command line", []string{"-cluster-etcd", "https://10.0.0.2:2379", "-cluster-etcd-password", password}, 2, "unknown flag"},
	} {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr, code := runHere(append(base, c.args...)...)
			require.Equal(t, c.code, code, "%s%s", stdout, stderr)
			require.Contains(t, stderr, c.want)
			require.NotContains(t, stdout+stderr, password)
		})
	}
	stdout, stderr, code := runHere(append(base, "-cluster-etcd", "https://10.0.0.2:2379", "-cluster-etcd-username", "plugvisor", "-cluster-etcd-password-file", secret)...)
	require.Zero(t, code, stderr)
	require.Equal(t, "the flags are valid (no -config given)\n", stdout)
	stdout, stderr, code = runHere(append(base, "-cluster-etcd", "http://127.0.0.1:2379")...)
	require.Zero(t, code, "plain HTTP on loopback is allowed (and warned at start): %s", stderr)
	require.Equal(t, "the flags are valid (no -config given)\n", stdout)
}

// memberReply dials a member port with cfg, as gRPC does (ALPN h2), and
// reads the first byte the member sends (gRPC's settings, once the
// handshake is done): nil when the member took the client, the refusal
// otherwise.
func memberReply(addr string, cfg *tls.Config) error {
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"}
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return err
	}
	_, err = conn.Read(make([]byte, 1))
	return err
}

// TestAFleetWithTLSEverywhereRefusesStrangersAtTheMemberPort runs the
// walkthrough's TLS on one agent: plugvisor tls makes the files, plugvisor
// etcd serves with etcd.pem, the agent reaches etcd and serves its member
// port with agent-n1.pem. A client without a certificate, with another
// CA's, or with the CLI's (no server use: no member's) cannot complete the
// handshake on the member port; a member's certificate can.
func TestAFleetWithTLSEverywhereRefusesStrangersAtTheMemberPort(t *testing.T) {
	dir := t.TempDir()
	tlsDir, stranger := filepath.Join(dir, "tls"), filepath.Join(dir, "stranger")
	makeTLS(t, tlsDir, "n1", "n2")
	makeTLS(t, stranger, "n1")
	client := loopbackURL(t)
	startEtcd(t, filepath.Join(dir, "etcd"), tlsDir, client, loopbackURL(t))
	member := strings.TrimPrefix(loopbackURL(t), "https://")
	f := func(name string) string { return filepath.Join(tlsDir, name) }
	data := dataDir(t)
	startAgent(t, data, "-node-id", "n1", "-cluster-etcd", client, "-cluster-address", member,
		"-cluster-etcd-ca", f("ca.pem"), "-cluster-etcd-cert", f("agent-n1.pem"), "-cluster-etcd-key", f("agent-n1-key.pem"),
		"-cluster-ca", f("ca.pem"), "-cluster-cert", f("agent-n1.pem"), "-cluster-key", f("agent-n1-key.pem"))
	stdout, stderr, code := cli(t, "node", "list", "-data-dir", data)
	require.Zero(t, code, stderr)
	require.Regexp(t, `(?m)^n1\s+up\s`, stdout, "the agent joined the fleet through etcd's TLS")

	pair := func(dir, name string) *tls.Config {
		cfg, err := tlsPair("cluster", filepath.Join(tlsDir, "ca.pem"), filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem"), false)
		require.NoError(t, err)
		return cfg
	}
	noCert, err := tlsPair("cluster", f("ca.pem"), "", "", true)
	require.NoError(t, err)
	for _, version := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		for _, c := range []struct {
			name string
			cfg  *tls.Config
		}{
			{"no certificate", noCert},
			{"another CA's member certificate", pair(stranger, "agent-n1")},
			{"the fleet's CLI certificate", pair(tlsDir, "cli")},
		} {
			t.Run(tls.VersionName(version)+", "+c.name, func(t *testing.T) {
				cfg := c.cfg.Clone()
				cfg.MinVersion, cfg.MaxVersion = version, version
				err := memberReply(member, cfg)
				require.Regexp(t, `^remote error: tls: (certificate required|bad certificate|handshake failure)$`, err, "the member refused the handshake")
				if version == tls.VersionTLS12 {
					cfg.NextProtos = []string{"h2"}
					conn, err := tls.Dial("tcp", member, cfg)
					if err == nil {
						_ = conn.Close()
					}
					require.Error(t, err, "TLS 1.2: the client's own handshake fails")
				}
			})
		}
		require.NoError(t, memberReply(member, pair(tlsDir, "agent-n2")), "%s: a member's certificate is taken", tls.VersionName(version))
	}
}
