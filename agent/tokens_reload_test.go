package agent_test

import (
	"net/http"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/agent"
)

// TestReloadTokensPutsTheFileInForceOnTheTCPListener rewrites the token
// file of a running agent: after ReloadTokens a token the file dropped is
// refused and a new one works; a file that no longer loads changes nothing.
func TestReloadTokensPutsTheFileInForceOnTheTCPListener(t *testing.T) {
	file := tokenFile(t)
	a := startWith(t, agent.Config{HTTPAddr: "127.0.0.1:0", TokenFile: file})
	c := httpClient(t, &http.Transport{DisableKeepAlives: true})
	health := func(token string) int {
		t.Helper()
		status, _, err := call(c, "GET", "http://"+a.HTTPAddr()+"/v1/health", token, "")
		require.NoError(t, err)
		return status
	}
	require.Equal(t, http.StatusOK, health(readToken))

	const newToken = "n-0123456789abcdef0123456789abcdef"
	require.NoError(t, os.WriteFile(file, []byte(newToken+" read dashboards\n"), 0o600))
	require.Equal(t, http.StatusOK, health(readToken), "nothing changes before the reload")
	n, err := a.ReloadTokens()
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, http.StatusUnauthorized, health(readToken), "a token the file dropped is revoked")
	require.Equal(t, http.StatusOK, health(newToken))

	require.NoError(t, os.Chmod(file, 0o644))
	_, err = a.ReloadTokens()
	require.ErrorContains(t, err, "-token-file: ")
	require.ErrorContains(t, err, "chmod 600")
	require.Equal(t, http.StatusOK, health(newToken), "a file that no longer loads leaves the tokens in force")
}

// TestReloadTokensWithoutATokenFileDoesNothing checks an agent without
// -token-file.
func TestReloadTokensWithoutATokenFileDoesNothing(t *testing.T) {
	a := startWith(t, agent.Config{})
	n, err := a.ReloadTokens()
	require.NoError(t, err)
	require.Zero(t, n)
}
