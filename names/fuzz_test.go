package names_test

import (
	"path/filepath"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/plugvisor/plugvisor/names"
)

// FuzzCheck: whatever Check accepts is safe as a path element and a log
// line; whatever it refuses fails with an error naming the field.
func FuzzCheck(f *testing.F) {
	for _, seed := range []string{"hostpath", ".", "..", "a/b", "a\x00b", "a\u202Eb", "a\u200Bb", "volumé", strings.Repeat("a", names.MaxLen)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		err := names.Check("field", v)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "field ") {
				t.Fatalf("error %q does not name the field", err)
			}
			return
		}
		switch {
		case v == "" || len(v) > names.MaxLen || !utf8.ValidString(v):
			t.Fatalf("accepted %q", v)
		case filepath.Base(v) != v, filepath.Clean(v) != v, strings.ContainsAny(v, `/\`):
			t.Fatalf("accepted %q, which is not one clean path element", v)
		case strings.ContainsFunc(v, unicode.IsControl):
			t.Fatalf("accepted %q, which holds a control character", v)
		}
		// A joined path stays inside its directory.
		if filepath.Dir(filepath.Join("/root", v)) != "/root" {
			t.Fatalf("accepted %q, which escapes its directory", v)
		}
	})
}

// FuzzCheckSocketPath: an accepted path is absolute, clean and fits sun_path.
func FuzzCheckSocketPath(f *testing.F) {
	for _, seed := range []string{"/run/a.sock", "a.sock", "/run/../a", "/run//a", "/" + strings.Repeat("s", names.MaxSocketPathLen)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if names.CheckSocketPath("socket path", p) != nil {
			return
		}
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || len(p) > names.MaxSocketPathLen || strings.ContainsRune(p, 0) {
			t.Fatalf("accepted %q", p)
		}
	})
}

// FuzzCheckKey: an accepted key is present, short, UTF-8, and free of
// control and bidirectional characters; a refusal names the map.
func FuzzCheckKey(f *testing.F) {
	for _, seed := range []string{"token", "csi.storage.k8s.io/fstype", "", "a\u202Eb", "a\x00b", "\xff\xfe", strings.Repeat("k", names.MaxKeyLen+1)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, k string) {
		err := names.CheckKey("secrets", k)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "secrets key ") {
				t.Fatalf("error %q does not name the map", err)
			}
			return
		}
		switch {
		case k == "" || len(k) > names.MaxKeyLen || !utf8.ValidString(k):
			t.Fatalf("accepted %q", k)
		case strings.ContainsFunc(k, func(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) }):
			t.Fatalf("accepted %q, which holds a control or bidirectional character", k)
		}
	})
}
