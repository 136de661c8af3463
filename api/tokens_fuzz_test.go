package api_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/plugvisor/plugvisor/api"
)

// FuzzParseTokens: a token file, whatever its bytes, is parsed or refused
// with ErrInvalidTokens, and the refusal never shows a field that may be a
// token: a line's first field (its token) or second (its rights, which
// may be the token when the fields are out of order), as long as a token
// may be, unless the same text is also a line's name, which errors may
// quote.
func FuzzParseTokens(f *testing.F) {
	long := strings.Repeat("t", api.MinTokenLength)
	f.Add("# ops\n" + long + "1 admin ops\n" + long + "2 read\n")
	f.Add("admin " + long + " ops\n")
	f.Add(long + " volumes,plugins,reda scheduler\n")
	f.Add(long + " read ../ops\n" + long + " read\n")
	f.Fuzz(func(t *testing.T, file string) {
		tokens, err := api.ParseTokens(strings.NewReader(file))
		if err == nil {
			if tokens.Len() == 0 {
				t.Fatal("a token file parsed with no token")
			}
			return
		}
		if !errors.Is(err, api.ErrInvalidTokens) {
			t.Fatalf("refused with an error of another kind: %v", err)
		}
		var secret, named []string
		for _, line := range strings.Split(file, "\n") {
			fields := strings.Fields(line)
			for i, field := range fields {
				switch {
				case i == 2:
					named = append(named, field)
				case i < 2 && len(field) >= api.MinTokenLength:
					secret = append(secret, field)
				}
			}
		}
		for _, s := range secret {
			if strings.Contains(err.Error(), s) && !strings.Contains(strings.Join(named, "\n"), s) {
				t.Fatalf("the refusal shows %q, which may be a token: %v", s, err)
			}
		}
	})
}
