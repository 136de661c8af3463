package names_test

import (
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/names"
)

// hostile is a plugin's 3 MB error message of issue 39: a line that
// fakes a log line, U+202E to reverse what follows on screen, and bytes
// that are not UTF-8, then 3 MB more.
var hostile = "mount failed\nlevel=INFO msg=\"all good\" \u202Egnp.exe\xff\xfe" + strings.Repeat("x\u202E\x1b[2J", 3<<20/7)

// TestTextKeepsPlainTextAndCutsHostileText: plain text is kept as is; a
// hostile message comes out at most MaxTextLen bytes and a note, valid
// UTF-8, one line, without control, bidirectional or zero-width
// characters, saying how long it was.
func TestTextKeepsPlainTextAndCutsHostileText(t *testing.T) {
	require.Equal(t, "volume vol-1 not found: no such file", names.Text("volume vol-1 not found: no such file"))
	require.Equal(t, "volumé déjà monté", names.Text("volumé déjà monté"))
	require.Equal(t, "two lines and a tab", names.Text("two lines\n\u200Band\ta tab\x00"))

	got := names.Text(hostile)
	require.True(t, utf8.ValidString(got))
	require.False(t, strings.ContainsFunc(got, hidden), "%q", got)
	require.True(t, strings.HasPrefix(got, `mount failed level=INFO msg="all good" gnp.exe`+"\uFFFD\uFFFD"), "%q", got[:60])
	require.True(t, strings.HasSuffix(got, "… (cut at 1024 of "+strconv.Itoa(len(hostile))+" bytes)"), "%q", got[len(got)-60:])
	require.LessOrEqual(t, len(got), names.MaxTextLen+64)
}

// hidden reports what Text must drop: control characters, and the
// bidirectional and zero-width ones of names.Check.
func hidden(r rune) bool {
	switch {
	case unicode.IsControl(r), r == 0x061C, r == 0x200E, r == 0x200F, r >= 0x202A && r <= 0x202E, r >= 0x2066 && r <= 0x2069,
		r >= 0x200B && r <= 0x200D, r == 0x00AD, r == 0x180E, r == 0xFEFF, r >= 0x2060 && r <= 0x2064:
		return true
	}
	return false
}

// FuzzText: whatever a plugin says, Text gives valid UTF-8 of one line,
// without control, bidirectional or zero-width characters, at most
// MaxTextLen bytes and its note; and printable ASCII within the limit as
// it was.
func FuzzText(f *testing.F) {
	for _, seed := range []string{"", "ok", "a\nb", "\xff", "\u202E", "\u200B", strings.Repeat("é", 600), hostile[:3000]} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := names.Text(s)
		switch {
		case !utf8.ValidString(got):
			t.Fatalf("Text(%q) = %q, not UTF-8", s, got)
		case len(got) > names.MaxTextLen+64:
			t.Fatalf("Text(%q) is %d bytes", s, len(got))
		case strings.ContainsFunc(got, hidden):
			t.Fatalf("Text(%q) = %q keeps a forbidden character", s, got)
		}
		if len(s) <= names.MaxTextLen && !strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r >= 0x7f }) && got != s {
			t.Fatalf("Text(%q) = %q changed plain text", s, got)
		}
	})
}
