// Package names holds the one validation that every plugin type, plugin
// name, alloc ID, node ID, namespace and volume ID passes, whichever layer
// takes it in (the API, the registry, the CSI catalog, discovery, the
// reference plugins), and the rules for unix socket paths.
//
// A name may become a path element, a storage key or a line in a log, so it
// must be safe as all three: present, at most MaxLen bytes of UTF-8, not "."
// or "..", and free of path separators, NUL, control characters, and the
// bidirectional and zero-width characters that make a name look like
// another one on screen.
//
// It imports only errclass, so every package can use it.
package names

import (
	"fmt"
	"path/filepath"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/plugvisor/plugvisor/errclass"
)

// MaxLen is the longest name or ID, in bytes. It leaves room for an
// extension and a directory within the 255-byte file-name limit of common
// file systems.
const MaxLen = 128

// MaxSocketPathLen is the longest unix socket path, in bytes: sun_path holds
// 108 bytes on Linux, one of them the terminating NUL.
const MaxSocketPathLen = 107

// ErrInvalid is matched, with errors.Is, by every error of Check and
// CheckSocketPath.
var ErrInvalid = errclass.New(errclass.Invalid, "invalid name")

// Error is one refused name: which field, the value (quoted safely) and why.
type Error struct {
	Field  string
	Value  string
	Reason string
	kind   error // a second sentinel it matches (ErrNotSocket), or nil
}

func (e *Error) Error() string {
	if e.Value == "" {
		return e.Field + " " + e.Reason
	}
	return fmt.Sprintf("%s %s %s", e.Field, quote(e.Value), e.Reason)
}

// Unwrap makes the error match ErrInvalid (and ErrNotSocket when it is one).
func (e *Error) Unwrap() []error {
	if e.kind == nil {
		return []error{ErrInvalid}
	}
	return []error{ErrInvalid, e.kind}
}

// remedy ends every refusal of a name's characters: it says what to use.
const remedy = "; use letters, digits, '-', '_' and single dots"

// Check reports why v cannot be the field (a name or ID, e.g. "plugin
// name"); nil when it can. The error is an *Error that names the field and
// the remedy.
func Check(field, v string) error {
	switch {
	case v == "":
		return &Error{Field: field, Value: v, Reason: "must not be empty"}
	case len(v) > MaxLen:
		return &Error{Field: field, Value: v, Reason: fmt.Sprintf("is %d bytes, over the limit of %d; use a shorter one", len(v), MaxLen)}
	case !utf8.ValidString(v):
		return &Error{Field: field, Value: v, Reason: "is not valid UTF-8" + remedy}
	case v == ".":
		return &Error{Field: field, Reason: "must not be \".\"" + remedy}
	case strings.ContainsAny(v, `/\`):
		return &Error{Field: field, Value: v, Reason: "must not contain a path separator" + remedy}
	case strings.Contains(v, ".."):
		return &Error{Field: field, Value: v, Reason: "must not contain \"..\"" + remedy}
	}
	if r, ok := firstForbidden(v); ok {
		return &Error{Field: field, Value: v, Reason: fmt.Sprintf("must not contain %s (U+%04X)%s", kind(r), r, remedy)}
	}
	return nil
}

// MaxKeyLen is the longest key of a map the API takes in (secrets,
// parameters, topology segments), in bytes.
const MaxKeyLen = 256

// CheckKey reports why k cannot be a key of the map field (e.g. "secrets"):
// present, at most MaxKeyLen bytes of UTF-8, and free of NUL, control,
// bidirectional and zero-width characters, since keys are shown (a
// volume's secret_keys, logs). Unlike a name, a key never becomes a path,
// so it may hold '/' and "..": CSI keys such as
// "csi.storage.k8s.io/fstype" do.
func CheckKey(field, k string) error {
	key := field + " key"
	switch {
	case k == "":
		return &Error{Field: key, Value: k, Reason: "must not be empty"}
	case len(k) > MaxKeyLen:
		return &Error{Field: key, Value: k, Reason: fmt.Sprintf("is %d bytes, over the limit of %d; use a shorter one", len(k), MaxKeyLen)}
	case !utf8.ValidString(k):
		return &Error{Field: key, Value: k, Reason: "is not valid UTF-8; use printable UTF-8 text"}
	}
	if r, ok := firstForbidden(k); ok {
		return &Error{Field: key, Value: k, Reason: fmt.Sprintf("must not contain %s (U+%04X); use printable UTF-8 text", kind(r), r)}
	}
	return nil
}

// Valid reports whether Check accepts v.
func Valid(v string) bool { return Check("name", v) == nil }

// CheckSocketPath reports why path cannot name a unix socket: it must be
// absolute, clean, at most MaxSocketPathLen bytes, valid UTF-8 and free of
// NUL, control, bidirectional and zero-width characters. It does not look at
// the file system (see CheckSocketFile).
func CheckSocketPath(field, path string) error {
	switch {
	case path == "":
		return &Error{Field: field, Value: path, Reason: "must not be empty; give the absolute path of a unix socket"}
	case !filepath.IsAbs(path):
		return &Error{Field: field, Value: path, Reason: "must be absolute; give the full path from /"}
	case len(path) > MaxSocketPathLen:
		return &Error{Field: field, Value: path, Reason: fmt.Sprintf("is %d bytes, over the unix limit of %d; use a shorter directory", len(path), MaxSocketPathLen)}
	case !utf8.ValidString(path):
		return &Error{Field: field, Value: path, Reason: "is not valid UTF-8"}
	case filepath.Clean(path) != path:
		return &Error{Field: field, Value: path, Reason: fmt.Sprintf("must be clean (no \"..\", \".\" or repeated slashes); use %q", filepath.Clean(path))}
	}
	if r, ok := firstForbidden(path); ok {
		return &Error{Field: field, Value: path, Reason: fmt.Sprintf("must not contain %s (U+%04X)", kind(r), r)}
	}
	return nil
}

// firstForbidden returns the first rune of v that no name may hold.
func firstForbidden(v string) (rune, bool) {
	for _, r := range v {
		if forbidden(r) {
			return r, true
		}
	}
	return 0, false
}

func forbidden(r rune) bool {
	return unicode.IsControl(r) || bidi(r) || zeroWidth(r)
}

// bidi reports the bidirectional formatting characters: marks, embeddings,
// overrides and isolates.
func bidi(r rune) bool {
	switch {
	case r == 0x061C, r == 0x200E, r == 0x200F:
		return true
	case r >= 0x202A && r <= 0x202E:
		return true
	case r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// zeroWidth reports characters that take no room on screen: zero-width
// space, (non-)joiner, word joiner, byte order mark, soft hyphen, and the
// invisible operators.
func zeroWidth(r rune) bool {
	switch {
	case r >= 0x200B && r <= 0x200D:
		return true
	case r == 0x00AD, r == 0x180E, r == 0xFEFF:
		return true
	case r >= 0x2060 && r <= 0x2064:
		return true
	}
	return false
}

func kind(r rune) string {
	switch {
	case r == 0:
		return "NUL"
	case unicode.IsControl(r):
		return "control characters"
	case bidi(r):
		return "a bidirectional formatting character"
	}
	return "a zero-width character"
}

// quote prints v so that what it holds is visible, truncated when long.
func quote(v string) string {
	const show = 48
	if len(v) > show {
		return fmt.Sprintf("%+q…", v[:show])
	}
	return fmt.Sprintf("%+q", v)
}
