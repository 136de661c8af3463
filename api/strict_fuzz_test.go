package api

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/plugvisor/plugvisor/names"
)

// FuzzCheckRawString: a JSON string that checkRawString accepts decodes to
// valid UTF-8 and holds U+FFFD only where the sender wrote one: nothing is
// replaced silently.
func FuzzCheckRawString(f *testing.F) {
	for _, s := range []string{"abc", "\xff\xfe", "\xc0\xaf", "\xed\xa0\x80", `\ud800`, `\udc00`, `\ud83d\ude00`, `\ud83d\u0041`, "\ufffd", `\uFFFD`, `a\"b`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		raw := `"` + s + `"`
		var decoded string
		if json.Unmarshal([]byte(raw), &decoded) != nil || checkRawString(`field "f"`, []byte(raw)) != nil {
			return
		}
		if !utf8.ValidString(decoded) {
			t.Fatalf("accepted %q, which decodes to invalid UTF-8", s)
		}
		sent := strings.Count(s, "\ufffd") + strings.Count(strings.ToLower(s), `\ufffd`)
		if got := strings.Count(decoded, "\ufffd"); got > sent {
			t.Fatalf("accepted %q, which decodes with %d U+FFFD where %d were sent", s, got, sent)
		}
	})
}

// FuzzCreateBodyBounds: a create body that decodes and passes its bounds
// holds no more entries than the limits and no key names.CheckKey refuses.
func FuzzCreateBodyBounds(f *testing.F) {
	for _, s := range []string{`{"secrets":{"a":"b"},"parameters":{"k/x":"v"}}`, `{"secrets":{"a\u202eb":"v"}}`,
		`{"topology":{"requisite":[{"z":"a","y":"b"}],"preferred":[{"x":"c"}]}}`, `{"mount_options":{"mount_flags":["ro","noatime","x"]}}`} {
		f.Add(s)
	}
	limits := Limits{Secrets: 2, Parameters: 2, TopologySegments: 2, MountFlags: 2}
	s := &Server{Limits: limits}
	f.Fuzz(func(t *testing.T, body string) {
		var b CreateBody
		w, r := request(body)
		if s.decode(w, r, &b, false) != nil {
			return
		}
		n := 0
		for _, list := range [][]map[string]string{b.Topology.Requisite, b.Topology.Preferred} {
			for _, seg := range list {
				n += len(seg)
				for k := range seg {
					if names.CheckKey("topology", k) != nil {
						t.Fatalf("accepted the topology key %q", k)
					}
				}
			}
		}
		if len(b.Secrets) > 2 || len(b.Parameters) > 2 || n > 2 || (b.MountOptions != nil && len(b.MountOptions.MountFlags) > 2) {
			t.Fatalf("accepted a body over its limits: %s", body)
		}
		for _, m := range []map[string]string{b.Secrets, b.Parameters} {
			for k := range m {
				if names.CheckKey("map", k) != nil {
					t.Fatalf("accepted the key %q", k)
				}
			}
		}
	})
}
