package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/internal/errwalk"
)

const (
	writeToken = "w-0123456789abcdef0123456789abcdef"
	readToken  = "r-0123456789abcdef0123456789abcdef"
)

func tokens(t *testing.T) *api.Tokens {
	t.Helper()
	tok, err := api.ParseTokens(strings.NewReader(writeToken + " write\n" + readToken + " read\n"))
	require.NoError(t, err)
	return tok
}

func TestEveryListenerRefusesWhatItMustWithAClearError(t *testing.T) {
	tcp := api.Listener{Name: "http 127.0.0.1:4646", Hosts: []string{"localhost:4646", "node1.example:4646"}, Port: "4646"}
	withTokens := tcp
	withTokens.Tokens = tokens(t)
	bearer := func(token string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/json"}
	}
	cases := []struct {
		name     string
		listener api.Listener
		req      request
		status   int
		want     string
	}{
		{"the unix socket serves its own name", unixListener, request{method: "GET", path: "/v1/plugins"}, 200, ""},
		{"the unix socket serves curl's localhost", unixListener, request{method: "GET", path: "/v1/plugins", host: "localhost"}, 200, ""},
		{"a rebound name is refused on the unix socket", unixListener,
			request{method: "GET", path: "/v1/plugins", host: "attacker.example"}, 421, `the Host header "attacker.example" does not name this listener`},
		{"a rebound name is refused on loopback TCP, reads too", tcp,
			request{method: "GET", path: "/v1/plugins", host: "attacker.example:4646"}, 421, "send Host: localhost:4646"},
		{"a rebound name is refused for a write, whatever its body", tcp,
			request{method: "POST", path: "/v1/plugins", body: registerBody("p", "a1"), host: "attacker.example:4646"}, 421, "does not name this listener"},
		{"an IP literal with the listener's port names it", tcp, request{method: "GET", path: "/v1/plugins", host: "127.0.0.1:4646"}, 200, ""},
		{"an IPv6 literal with the listener's port names it", tcp, request{method: "GET", path: "/v1/plugins", host: "[::1]:4646"}, 200, ""},
		{"an IP literal with another port does not", tcp, request{method: "GET", path: "/v1/plugins", host: "127.0.0.1:80"}, 421, "does not name"},
		{"a configured name with the port names it", tcp, request{method: "GET", path: "/v1/plugins", host: "NODE1.example:4646"}, 200, ""},
		{"a configured name with another port does not", tcp, request{method: "GET", path: "/v1/plugins", host: "node1.example:9999"}, 421, "does not name"},
		{"a text/plain write is refused (browser CSRF)", unixListener,
			request{method: "POST", path: "/v1/plugins", body: registerBody("p", "a1"), header: map[string]string{"Content-Type": "text/plain"}},
			415, `POST needs Content-Type: application/json, not "text/plain"`},
		{"a form write is refused", tcp,
			request{method: "POST", path: "/v1/plugins", body: "a=b", host: "localhost:4646",
				header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}}, 415, "needs Content-Type: application/json"},
		{"a bodiless DELETE still needs the JSON content type", unixListener,
			request{method: "DELETE", path: "/v1/plugins/csi-node/p/a1", header: map[string]string{}}, 415, `DELETE needs Content-Type: application/json, not ""`},
		{"a JSON content type with a charset is a JSON content type", unixListener,
			request{method: "POST", path: "/v1/plugins", body: registerBody("p", "a1"),
				header: map[string]string{"Content-Type": "application/json; charset=utf-8"}}, 200, ""},
		{"a token listener refuses a request without a token", withTokens,
			request{method: "GET", path: "/v1/plugins", host: "localhost:4646"}, 401, "needs an ACL token: send Authorization: Bearer <token>"},
		{"a token listener refuses a wrong token", withTokens,
			request{method: "GET", path: "/v1/plugins", host: "localhost:4646", header: bearer("not-a-token-at-all-0000")}, 401, "the ACL token is not valid"},
		{"a token listener refuses another scheme", withTokens,
			request{method: "GET", path: "/v1/plugins", host: "localhost:4646", header: map[string]string{"Authorization": "Basic " + writeToken}},
			401, "needs an ACL token"},
		{"a read token reads", withTokens, request{method: "GET", path: "/v1/plugins", host: "localhost:4646", header: bearer(readToken)}, 200, ""},
		{"a read token may not write", withTokens,
			request{method: "POST", path: "/v1/plugins", body: registerBody("p", "a1"), host: "localhost:4646", header: bearer(readToken)},
			403, `the ACL token "line2" has the rights read; POST /v1/plugins needs the plugins right: use a token whose rights include plugins or admin`},
		{"a write token writes", withTokens,
			request{method: "POST", path: "/v1/plugins", body: registerBody("p", "a1"), host: "localhost:4646", header: bearer(writeToken)}, 200, ""},
		{"the bearer scheme is case-insensitive", withTokens,
			request{method: "GET", path: "/v1/plugins", host: "localhost:4646", header: map[string]string{"Authorization": "bearer " + readToken}}, 200, ""},
		{"the Host is checked before the token", withTokens,
			request{method: "GET", path: "/v1/plugins", host: "attacker.example:4646", header: bearer(writeToken)}, 421, "does not name"},
		{"the token is checked before the content type", withTokens,
			request{method: "POST", path: "/v1/plugins", body: "x", host: "localhost:4646", header: map[string]string{"Content-Type": "text/plain"}},
			401, "needs an ACL token"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackend(t)
			got := serve(t, b.server.HandlerFor(tc.listener), tc.req)
			require.Equal(t, tc.status, got.status, got.body)
			require.Equal(t, "application/json", got.header.Get("Content-Type"))
			if tc.status == http.StatusOK {
				return
			}
			msg := got.error(t)
			require.Contains(t, msg, tc.want)
			require.Empty(t, errwalk.Repeated(msg), "%q says a thing twice", msg)
			require.False(t, packagePrefix.MatchString(msg), "%q names a package", msg)
			require.Empty(t, b.registry.ListPlugins(""), "a refused request changes nothing")
			if tc.status == http.StatusUnauthorized {
				require.Equal(t, `Bearer realm="plugvisor"`, got.header.Get("WWW-Authenticate"))
			}
		})
	}
}

func TestTokensAreNeverEchoedNorLogged(t *testing.T) {
	b := newBackend(t)
	h := b.server.HandlerFor(api.Listener{Name: "http 127.0.0.1:4646", Port: "4646", Tokens: tokens(t)})
	for _, token := range []string{readToken, "guess-0123456789abcdef-secret"} {
		got := serve(t, h, request{method: "POST", path: "/v1/plugins", body: registerBody("p", "a1"), host: "127.0.0.1:4646",
			header: map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/json"}})
		require.Contains(t, []int{401, 403}, got.status)
		require.NotContains(t, got.body, token)
	}
	require.Contains(t, b.logs.String(), "request refused", "refusals are logged")
	require.NotContains(t, b.logs.String(), readToken)
	require.NotContains(t, b.logs.String(), "guess-0123456789abcdef-secret")
}
