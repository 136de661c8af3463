package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/api"
)

// rightTokens are one token per right, each named after its right.
var rightTokens = map[string]string{
	"read":    "read-0123456789abcdef0123456789",
	"volumes": "volumes-0123456789abcdef01234567",
	"plugins": "plugins-0123456789abcdef01234567",
	"admin":   "admin-0123456789abcdef0123456789",
}

func rightsTokens(t *testing.T) *api.Tokens {
	t.Helper()
	var file strings.Builder
	for right, token := range rightTokens {
		fmt.Fprintf(&file, "%s %s %s-token\n", token, right, right)
	}
	tokens, err := api.ParseTokens(strings.NewReader(file.String()))
	require.NoError(t, err)
	return tokens
}

// TestEveryRightAgainstEveryRouteOfTheSpec takes every operation of
// openapi.yaml, which must declare its right (x-right), and sends it with a
// token of each right, and with none: a token whose rights cover the
// operation reaches its handler (neither 401 nor 403); any other gets 403
// naming the right it lacks, and changes nothing; no token gets 401.
func TestEveryRightAgainstEveryRouteOfTheSpec(t *testing.T) {
	doc := loadSpec(t)
	tokens := rightsTokens(t)
	b := newBackend(t)
	b.server.Metrics = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("m 1\n")) })
	h := b.server.HandlerFor(api.Listener{Name: "http 127.0.0.1:4646", Port: "4646", Tokens: tokens})
	// A request whose client is gone: the event stream ends at once.
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	rights := map[string]api.Rights{"read": api.Read, "volumes": api.Volumes, "plugins": api.Plugins, "admin": api.Admin}
	operations := 0
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			operations++
			declared, ok := op.Extensions["x-right"].(string)
			require.True(t, ok, "%s %s declares no right: give it x-right (read, volumes, plugins or admin)", method, path)
			need, ok := rights[declared]
			require.True(t, ok, "%s %s: x-right %q is not a right", method, path, declared)
			target := "http://127.0.0.1:4646" + strings.NewReplacer("{", "x", "}", "").Replace(path)
			for _, holder := range []string{"", "read", "volumes", "plugins", "admin"} {
				req := httptest.NewRequestWithContext(gone, method, target, strings.NewReader("{}"))
				req.Header.Set("Content-Type", "application/json")
				if holder != "" {
					req.Header.Set("Authorization", "Bearer "+rightTokens[holder])
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				_, has := tokens.Lookup(rightTokens[holder])
				what := fmt.Sprintf("%s %s with the %q token: %s", method, path, holder, rec.Body)
				switch {
				case holder == "":
					require.Equal(t, http.StatusUnauthorized, rec.Code, what)
				case has.Has(need):
					require.NotContains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, rec.Code, what)
				default:
					require.Equal(t, http.StatusForbidden, rec.Code, what)
					require.Contains(t, rec.Body.String(), fmt.Sprintf("%s-token", holder), what)
					require.Contains(t, rec.Body.String(), "needs the "+declared+" right", what)
				}
				if holder == "" || !has.Has(need) {
					require.Empty(t, b.registry.ListPlugins(""), "a refused request changes nothing: %s", what)
				}
			}
		}
	}
	require.Equal(t, len(api.RoutesOf(b.server))+1, operations, "every route, and /metrics, is in the spec")
}
