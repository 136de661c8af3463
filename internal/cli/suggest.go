package cli

import (
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Closest is the candidate nearest to word, by edits (a letter added,
// removed or changed, two swapped), or "" when none is near: at most 2 edits, and
// fewer than half of word's letters. A tie goes to the first candidate.
func Closest(word string, candidates []string) string {
	best, bestDistance := "", 0
	for _, c := range candidates {
		d := editDistance(strings.ToLower(word), strings.ToLower(c))
		if d > 2 || 2*d >= len(word) {
			continue
		}
		if best == "" || d < bestDistance {
			best, bestDistance = c, d
		}
	}
	return best
}

// editDistance is the number of edits between a and b: a letter added,
// removed or changed, or two neighbours swapped (optimal string alignment).
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// flagError is pflag's error err for c as plugvisor writes flags (one
// dash), with the flag c has that an unknown one is closest to.
func flagError(c *cobra.Command, err error) error {
	msg := strings.ReplaceAll(err.Error(), "--", "-")
	name, unknown := strings.CutPrefix(msg, "unknown flag: -")
	if !unknown {
		return Usagef("%s", msg)
	}
	var names []string
	add := func(f *pflag.Flag) {
		if !f.Hidden {
			names = append(names, f.Name)
		}
	}
	c.Flags().VisitAll(add)
	c.InheritedFlags().VisitAll(add)
	if s := Closest(name, names); s != "" {
		return Usagef("%s (did you mean -%s?)", msg, s)
	}
	return Usagef("%s", msg)
}
