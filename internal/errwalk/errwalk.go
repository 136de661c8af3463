// Package errwalk checks that an error message says each thing once: the
// tests that walk the refusals of the CLI, the API and the Go facades use
// it (see "Errors" in ARCHITECTURE.md).
//
//	if r := errwalk.Repeated(err.Error()); r != "" { t.Errorf("%q repeats %q", err, r) }
package errwalk

import (
	"strings"
	"unicode"
)

// small are the words a sentence may repeat: a phrase made of them alone
// is no repetition.
var small = map[string]bool{
	"a": true, "an": true, "the": true, "of": true, "to": true, "in": true, "on": true, "is": true,
	"by": true, "and": true, "or": true, "not": true, "with": true, "for": true, "its": true, "it": true,
	"be": true, "as": true, "at": true, "from": true, "no": true, "has": true, "was": true, "are": true,
}

// Repeated returns what msg says twice, or "" when it says each thing once.
// Quoted values ("v1") and absolute paths (/run/x.sock) are left out, as
// they name things. It finds:
//   - a word said twice in a row ("agent: agent: ...");
//   - a prefix said twice: a segment before ": " of one or two words that
//     stands again as a segment ("names: invalid: names: not a unix socket");
//   - a phrase of two or three words, two of them not small, said twice
//     ("volume not found: ... volume not found").
func Repeated(msg string) string {
	words := wordsOf(msg)
	for i := 1; i < len(words); i++ {
		if words[i] == words[i-1] && !small[words[i]] {
			return words[i]
		}
	}
	if p := repeatedPrefix(msg); p != "" {
		return p
	}
	seen := map[string]bool{}
	for n := 2; n <= 3; n++ {
		for i := 0; i+n <= len(words); i++ {
			if phrase := words[i : i+n]; big(phrase) >= 2 {
				key := strings.Join(phrase, " ")
				if seen[key] {
					return key
				}
				seen[key] = true
			}
		}
	}
	return ""
}

// big counts the words of phrase that are not small.
func big(phrase []string) int {
	n := 0
	for _, w := range phrase {
		if !small[w] {
			n++
		}
	}
	return n
}

// repeatedPrefix returns a short segment of msg (between ": ") that stands
// twice.
func repeatedPrefix(msg string) string {
	seen := map[string]bool{}
	for _, seg := range strings.Split(unquoted(msg), ": ") {
		seg = strings.ToLower(strings.TrimSpace(seg))
		if seg == "" || len(strings.Fields(seg)) > 2 {
			continue
		}
		if seen[seg] {
			return seg
		}
		seen[seg] = true
	}
	return ""
}

// wordsOf returns msg's words of two letters or more, lower case, without
// its quoted values and its numbers.
func wordsOf(msg string) []string {
	var words []string
	for _, w := range strings.FieldsFunc(strings.ToLower(unquoted(msg)), func(r rune) bool {
		return !unicode.IsLetter(r) && r != '-' && r != '_'
	}) {
		if len(w) > 1 {
			words = append(words, w)
		}
	}
	return words
}

// unquoted is msg with every "..." value and every absolute path left out.
func unquoted(msg string) string {
	var b strings.Builder
	in := false
	for i := 0; i < len(msg); i++ {
		switch {
		case msg[i] == '\\' && in:
			i++
		case msg[i] == '"':
			in = !in
			if !in {
				b.WriteString("_")
			}
		case in:
		case msg[i] == '/' && (i == 0 || strings.IndexByte(" (=", msg[i-1]) >= 0):
			for i+1 < len(msg) && strings.IndexByte(" ),;:\n", msg[i+1]) < 0 {
				i++
			}
			b.WriteString("_")
		default:
			b.WriteByte(msg[i])
		}
	}
	return b.String()
}
