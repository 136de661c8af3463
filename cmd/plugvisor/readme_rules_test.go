package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/rogpeppe/go-internal/txtar"
	"github.com/stretchr/testify/require"
)

// shownLine is an output line as a block shows it, under "# ".
func shownLine(line string) string {
	return strings.TrimPrefix(strings.TrimPrefix(line, "#"), " ")
}

// asScripted is a block's steps in the form of the script's: each output
// a whole shows check compares is kept as written, and each other becomes
// the pattern of a stdout or stderr check.
func asScripted(block, script []scriptStep) []scriptStep {
	out := make([]scriptStep, len(block))
	for i, step := range block {
		out[i] = scriptStep{command: step.command}
		whole := i < len(script) && script[i].whole
		for _, line := range step.want {
			if whole {
				out[i].want, out[i].whole = append(out[i].want, line), true
			} else {
				out[i].want = append(out[i].want, wantPattern(strings.TrimSpace(line)))
			}
		}
	}
	return out
}

// archiveLines are the lines of the file a script's "shows stdout FILE"
// names, from the script's archive.
func archiveLines(t *testing.T, archive *txtar.Archive, path string, args []string) []string {
	require.Len(t, args, 2, "%s: shows stdout|stderr FILE", path)
	for _, f := range archive.Files {
		if f.Name == args[1] {
			return strings.Split(strings.TrimSuffix(string(f.Data), "\n"), "\n")
		}
	}
	t.Fatalf("%s: shows %s: the archive has no file %s", path, args[0], args[1])
	return nil
}

// showsOutput is the script command "shows stdout|stderr FILE": the last
// command's whole output is FILE's lines, one for one, each literal but
// for "...", which stands for anything. So a block's output is compared
// where it is shown, lines left out included.
func showsOutput(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 || (args[0] != "stdout" && args[0] != "stderr") {
		ts.Fatalf("usage: shows stdout|stderr FILE")
	}
	got := strings.Split(strings.TrimSuffix(ts.ReadFile(args[0]), "\n"), "\n")
	want := strings.Split(strings.TrimSuffix(ts.ReadFile(args[1]), "\n"), "\n")
	if err := sameLines(got, want); err != nil {
		ts.Fatalf("%s is not as %s shows it: %v\n--- got:\n%s\n--- shown:\n%s", args[0], args[1], err,
			strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// sameLines reports the first line of got that does not match its line of
// want, or a count that differs.
func sameLines(got, want []string) error {
	for i, w := range want {
		if i >= len(got) {
			return errorf("line %d is missing: %q", i+1, w)
		}
		if !regexp.MustCompile("^" + wantPattern(w) + "$").MatchString(got[i]) {
			return errorf("line %d is %q, shown as %q", i+1, got[i], w)
		}
	}
	if len(got) > len(want) {
		return errorf("line %d is not shown: %q", len(want)+1, got[len(want)])
	}
	return nil
}

type lineError string

func (e lineError) Error() string { return string(e) }

func errorf(format string, args ...any) error {
	return lineError(fmt.Sprintf(format, args...))
}

// TestSameLinesComparesEveryLineInOrder checks the comparison of shows.
func TestSameLinesComparesEveryLineInOrder(t *testing.T) {
	want := []string{"volume default/db", "  plugin ..., schedulable: true (1 healthy node)"}
	require.NoError(t, sameLines([]string{"volume default/db", "  plugin hp, schedulable: true (1 healthy node)"}, want))
	require.ErrorContains(t, sameLines([]string{"volume default/db"}, want), "line 2 is missing")
	require.ErrorContains(t, sameLines(append([]string{"volume default/db", "  plugin hp, schedulable: true (1 healthy node)"}, "  usage: 0"), want),
		`line 3 is not shown: "  usage: 0"`)
	require.ErrorContains(t, sameLines([]string{"volume default/db", "plugin hp, schedulable: true (1 healthy node)"}, want),
		"line 2 is")
}

// shellInfo are the info strings of fenced blocks that hold commands.
var shellInfo = map[string]bool{"sh": true, "console": true, "bash": true, "shell": true}

// TestEveryCommandBlockOfTheDocsRunsOrSaysWhyNot checks the fenced blocks
// of README.md and docs/*.md: each names its language, and each block of
// commands either runs as a testscript (<!-- testscript:NAME -->) or says
// on the line above why it cannot (<!-- not-run: REASON -->).
func TestEveryCommandBlockOfTheDocsRunsOrSaysWhyNot(t *testing.T) {
	fence := regexp.MustCompile("(?m)^```(.*)$")
	for _, file := range docFiles(t) {
		text, err := os.ReadFile(file)
		require.NoError(t, err)
		opening := true
		for _, m := range fence.FindAllSubmatchIndex(text, -1) {
			if !opening {
				opening = true
				continue
			}
			opening = false
			info := string(text[m[2]:m[3]])
			line := 1 + strings.Count(string(text[:m[0]]), "\n")
			require.NotEmpty(t, info, "%s:%d: the block names no language (sh, console, text, json, go, hcl ...)", file, line)
			if !shellInfo[info] {
				continue
			}
			above := lineAbove(string(text), m[0])
			require.Regexp(t, `^<!-- (testscript:[a-z-]+( continued)?|not-run: \S.*) -->$`, above,
				"%s:%d: a block of commands runs as a testscript (<!-- testscript:NAME --> above it) or says why not (<!-- not-run: REASON -->)", file, line)
		}
	}
}

// lineAbove is the line of text that ends just before offset.
func lineAbove(text string, offset int) string {
	before := strings.TrimSuffix(text[:offset], "\n")
	return before[strings.LastIndex(before, "\n")+1:]
}
