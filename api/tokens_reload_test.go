package api_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/api"
)

// TestReplacePutsTheNewTokensInForceAllAtOnce checks a token file read
// again: the old tokens stop working and the new ones work, while checks
// run on other goroutines (under -race).
func TestReplacePutsTheNewTokensInForceAllAtOnce(t *testing.T) {
	const oldToken, newToken = "old-0123456789abcdef", "new-0123456789abcdef"
	parse := func(s string) *api.Tokens {
		tok, err := api.ParseTokens(strings.NewReader(s))
		require.NoError(t, err)
		return tok
	}
	inForce := parse(oldToken + " admin ops\n")
	require.Equal(t, api.Write, inForce.Rights(oldToken))

	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = inForce.Lookup(oldToken)
				_ = inForce.Len()
			}
		}()
	}
	inForce.Replace(parse(newToken + " read dashboards\n"))
	close(stop)
	wg.Wait()

	require.Equal(t, api.NoRights, inForce.Rights(oldToken), "a token the new file lacks is revoked")
	name, rights := inForce.Lookup(newToken)
	require.Equal(t, "dashboards", name)
	require.Equal(t, api.Read, rights)
	require.Equal(t, 1, inForce.Len())
}
