package main

import (
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
	const token = "0123456789abcdef0123456789abcdef"
	require.NoError(t, os.WriteFile(tokens, []byte(token+" read\n"), 0o600))
	a := startAgent(t, dataDir(t), "-http", "127.0.0.1:0", "-token-file", tokens)
	// The API may answer on the unix socket a moment before "agent started"
	// names the TCP address.
	var addr []string
	require.Eventually(t, func() bool {
		addr = regexp.MustCompile(`http=(127\.0\.0\.1:\d+)`).FindStringSubmatch(a.stderr.String())
		return len(addr) == 2
	}, settle, 10*time.Millisecond, "the agent logs its TCP address: %s", a.stderr)
	for tok, want := range map[string]int{"": http.StatusUnauthorized, token: http.StatusOK} {
		req, err := http.NewRequest("GET", "http://"+addr[1]+"/v1/plugins", nil)
		require.NoError(t, err)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode)
	}
	http.DefaultClient.CloseIdleConnections()
	require.NotContains(t, a.stderr.String(), "INSECURE")
	require.NotContains(t, a.stderr.String(), token, "the token is never logged")

	insecure := startAgent(t, dataDir(t), "-http", "127.0.0.1:0", "-http-insecure")
	require.True(t, strings.Contains(insecure.stderr.String(), "[WARN]  plugvisor: INSECURE: -http-insecure is set"), insecure.stderr.String())
}
