package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTheAgentRefusesAnUnprotectedTCPListener(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"beyond loopback without TLS", []string{"-http", "0.0.0.0:0"}, "reaches beyond this host without TLS: give -tls-cert, -tls-key and -tls-ca"},
		{"loopback without tokens or TLS", []string{"-http", "127.0.0.1:0"}, "give -token-file"},
		{"half the TLS flags", []string{"-http", "127.0.0.1:0", "-tls-cert", "c.pem"}, "-tls-key and -tls-ca missing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := cli(t, append([]string{"agent", "-data-dir", dataDir(t)}, tc.args...)...)
			require.Equal(t, 1, code, stderr)
			require.Contains(t, stderr, tc.want)
		})
	}
}

func TestTheAgentServesTCPWithTokensAndWarnsWhenInsecure(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	const (
		token      = "0123456789abcdef0123456789abcdef"
		oldWrite   = "w123456789abcdef0123456789abcdef"
		volumesTok = "v123456789abcdef0123456789abcdef"
	)
	// A file of before rights were split (read, write) and a new line.
	require.NoError(t, os.WriteFile(tokens, []byte(token+" read\n"+oldWrite+" write\n"+volumesTok+" volumes scheduler\n"), 0o600))
	dir := dataDir(t)
	a := startAgent(t, dir, "-http", "127.0.0.1:0", "-token-file", tokens)
	// The API may answer on the unix socket a moment before "agent started"
	// names the TCP address.
	var addr []string
	require.Eventually(t, func() bool {
		addr = regexp.MustCompile(`http=(127\.0\.0\.1:\d+)`).FindStringSubmatch(a.stderr.String())
		return len(addr) == 2
	}, settle, 10*time.Millisecond, "the agent logs its TCP address: %s", a.stderr)
	register := `{"type":"csi-node","name":"p","alloc_id":"a1","connection":{"socket_path":"/run/csi/nobody-a1.sock"}}`
	cases := []struct {
		token, method, path, body string
		want                      int
	}{
		{"", "GET", "/v1/plugins", "", http.StatusUnauthorized},
		{token, "GET", "/v1/plugins", "", http.StatusOK},
		{token, "POST", "/v1/plugins", register, http.StatusForbidden},
		{volumesTok, "POST", "/v1/plugins", register, http.StatusForbidden},
		{oldWrite, "POST", "/v1/plugins", register, http.StatusOK},
	}
	for _, tc := range cases {
		req, err := http.NewRequest(tc.method, "http://"+addr[1]+tc.path, strings.NewReader(tc.body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, tc.want, resp.StatusCode, "%s %s", tc.method, tc.path)
	}
	http.DefaultClient.CloseIdleConnections()
	_, stderr, code := cli(t, "plugin", "register", "-data-dir", dir, "-type", "csi-node", "-name", "q", "-alloc", "a1",
		"-socket", "/run/csi/nobody-q.sock")
	require.Equal(t, 0, code, stderr)
	require.Eventually(t, func() bool {
		return strings.Contains(a.stderr.String(), "alloc_id=a1 socket=/run/csi/nobody-a1.sock previous=\"\" force=false by=token:line2") &&
			strings.Contains(a.stderr.String(), fmt.Sprintf("name=q alloc_id=a1 socket=/run/csi/nobody-q.sock previous=\"\" force=false by=unix:uid=%d", os.Getuid()))
	}, settle, 10*time.Millisecond, "the agent logs who registered: %s", a.stderr)
	require.NotContains(t, a.stderr.String(), "INSECURE")
	for _, tok := range []string{token, oldWrite, volumesTok} {
		require.NotContains(t, a.stderr.String(), tok, "a token is never logged")
	}

	insecure := startAgent(t, dataDir(t), "-http", "127.0.0.1:0", "-http-insecure")
	require.Eventually(t, func() bool {
		return strings.Contains(insecure.stderr.String(), "[WARN]  plugvisor: INSECURE: -http-insecure is set")
	}, settle, 10*time.Millisecond, "the agent warns of -http-insecure (its log comes through a pipe, after the health answer): %s", insecure.stderr)
}
