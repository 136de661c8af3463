package fleet

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParseKeyring: a keyring file, whatever its bytes, is read or
// refused with ErrKeyring, and the refusal never shows a field that may
// be a key: a line's second field (its key) of 16 characters or more, or
// a first field that may be part of one (its fields swapped, or a key
// pasted alone).
func FuzzParseKeyring(f *testing.F) {
	key := "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
	f.Add("# keys\n20261129T150405Z " + key + "\n")
	f.Add(key + " 20261129T150405Z\n")
	f.Add("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA/= k1\n")
	f.Add("k1 AAAA\nk1 " + key + "\n")
	f.Fuzz(func(t *testing.T, text string) {
		k, err := parseKeyring("keyring", []byte(text))
		if err == nil {
			if len(k.IDs()) == 0 {
				t.Fatal("a keyring read with no key")
			}
			return
		}
		if !errors.Is(err, ErrKeyring) {
			t.Fatalf("refused with an error of another kind: %v", err)
		}
		// The error may show a first field that is no part of a key; what
		// it shows of them is taken out before the check.
		msg := err.Error()
		var secrets []string
		for _, line := range strings.Split(text, "\n") {
			for i, field := range strings.Fields(line) {
				switch {
				case i == 0 && !mayBeKey(field):
					msg = strings.ReplaceAll(msg, field, "")
				case i == 0 || (i == 1 && len(field) >= 16):
					secrets = append(secrets, field)
				}
			}
		}
		for _, secret := range secrets {
			if (len(secret) >= 16 || mayBeKey(secret)) && strings.Contains(msg, secret) {
				t.Fatalf("the refusal shows %q, which may be a key: %v", secret, err)
			}
		}
	})
}
