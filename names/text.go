package names

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxTextLen is the most of a plugin's own text, an error message or a
// volume's condition, that the agent keeps, in bytes.
const MaxTextLen = 1024

// Text returns a plugin's text s as safe to answer, record and log: bytes
// that are not UTF-8 become U+FFFD, line breaks and tabs become spaces,
// other control characters and the bidirectional and zero-width ones are
// dropped, and what is left is cut after MaxTextLen bytes, saying how long
// s was. It stops reading s once it has kept MaxTextLen bytes.
func Text(s string) string {
	if len(s) <= MaxTextLen && plain(s) {
		return s
	}
	var b strings.Builder
	b.Grow(min(len(s), MaxTextLen) + 32)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		out := r // RuneError for a byte that is not UTF-8: U+FFFD
		switch {
		case r == '\n', r == '\r', r == '\t':
			out = ' '
		case r != utf8.RuneError && forbidden(r):
			out = -1
		}
		if out >= 0 {
			if b.Len()+utf8.RuneLen(out) > MaxTextLen {
				b.WriteString("… (cut at " + strconv.Itoa(MaxTextLen) + " of " + strconv.Itoa(len(s)) + " bytes)")
				return b.String()
			}
			b.WriteRune(out)
		}
		i += size
	}
	return b.String()
}

// plain says whether s is printable ASCII and spaces only.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= utf8.RuneSelf || (c < ' ' || c == 0x7f) {
			return false
		}
	}
	return true
}
