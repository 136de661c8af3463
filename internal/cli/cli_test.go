package cli_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/internal/cli"
)

// tool is a small command tree: tool greet -name N [-loud] WHO, and
// tool fail, whose run fails.
func tool(got *[]string) *cobra.Command {
	var name string
	var loud bool
	greet := &cobra.Command{
		Use:     "greet -name N WHO",
		Short:   "greet someone",
		Example: "  tool greet -name me you",
		Args:    cli.Args("WHO", "tool greet -name me you"),
		RunE: func(_ *cobra.Command, args []string) error {
			*got = append(*got, name, args[0], map[bool]string{true: "loud", false: "quiet"}[loud])
			return nil
		},
	}
	greet.Flags().StringVar(&name, "name", "", "who greets")
	greet.Flags().BoolVar(&loud, "loud", false, "shout")
	cli.Require(greet, "name")
	fail := &cobra.Command{
		Use:  "fail",
		RunE: func(*cobra.Command, []string) error { return errors.New("it broke") },
	}
	group := &cobra.Command{Use: "group", Short: "holds greet"}
	group.AddCommand(&cobra.Command{Use: "inner", RunE: func(*cobra.Command, []string) error { return nil }})
	root := &cobra.Command{Use: "tool", Version: "tool 1.0"}
	root.AddCommand(greet, fail, group)
	return root
}

func TestExecuteParsesOneDashFlagsAnywhereAndSaysWhatIsWrong(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   string
		code   int
		got    []string
		stdout string
		stderr string
	}{
		{"one-dash flags after the argument", "greet you -name me -loud", 0, []string{"me", "you", "loud"}, "", ""},
		{"two-dash flags before it", "greet --name=me --loud=false you", 0, []string{"me", "you", "quiet"}, "", ""},
		{"a value that starts with a dash", "greet -name -me you", 0, []string{"-me", "you", "quiet"}, "", ""},
		{"after --, a dash is an argument", "greet -name me -- -you", 0, []string{"me", "-you", "quiet"}, "", ""},
		{"a missing required flag", "greet you", 2, nil, "", "tool greet: missing required flag -name (who greets)\nsee: tool greet -h\n"},
		{"a missing argument", "greet -name me", 2, nil, "", "tool greet: greet needs WHO, e.g. tool greet -name me you\nsee: tool greet -h\n"},
		{"an unknown flag", "greet -name me you -shout", 2, nil, "", "tool greet: unknown flag: -shout\nsee: tool greet -h\n"},
		{"an unknown flag near one", "greet -nme me you", 2, nil, "", "tool greet: unknown flag: -nme (did you mean -name?)\nsee: tool greet -h\n"},
		{"a two-dash unknown flag near one", "greet --name me you --lod", 2, nil, "", "tool greet: unknown flag: -lod (did you mean -loud?)\nsee: tool greet -h\n"},
		{"a failure", "fail", 1, nil, "", "tool fail: it broke\n"},
		{"a group without its subcommand", "group", 2, nil, "", "tool group: missing subcommand (want inner)\nsee: tool group -h\n"},
		{"a group with a subcommand it lacks", "group outer -name x", 2, nil, "", "tool group: unknown subcommand \"outer\" (want inner)\nsee: tool group -h\n"},
		{"the version", "-version", 0, nil, "tool 1.0\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			var stdout, stderr bytes.Buffer
			code := cli.Execute(t.Context(), tool(&got), strings.Fields(tc.args), &stdout, &stderr)
			require.Equal(t, tc.code, code, stderr.String())
			require.Equal(t, tc.got, got)
			require.Equal(t, tc.stdout, stdout.String())
			require.Equal(t, tc.stderr, stderr.String())
		})
	}
}

func TestHelpShowsTheUsageOnceWithTheFlagsAsTyped(t *testing.T) {
	var stdout bytes.Buffer
	require.NoError(t, cli.Run(t.Context(), tool(new([]string)), []string{"greet", "-h"}, &stdout, &stdout))
	require.Equal(t, `greet someone

Usage:
  tool greet -name N WHO [flags]

Examples:
  tool greet -name me you

Flags:
  -h, -help      help for greet
  -loud          shout
  -name string   who greets (required)
`, stdout.String())
}

func TestRunReturnsTheErrorAndMarksUsageErrors(t *testing.T) {
	err := cli.Run(t.Context(), tool(new([]string)), []string{"greet", "you"}, &bytes.Buffer{}, &bytes.Buffer{})
	require.ErrorIs(t, err, cli.ErrUsage)
	require.ErrorIs(t, err, errclass.Invalid)
	err = cli.Run(t.Context(), tool(new([]string)), []string{"fail"}, &bytes.Buffer{}, &bytes.Buffer{})
	require.EqualError(t, err, "it broke")
	require.NotErrorIs(t, err, cli.ErrUsage)
}

// codedError names its code.
type codedError struct{}

func (codedError) Error() string { return "no such thing" }
func (codedError) Code() string  { return "not_found" }

func TestWithJSONAnErrorIsOneJSONObjectOnStderr(t *testing.T) {
	jsonTool := func() *cobra.Command {
		var asJSON bool
		lookup := &cobra.Command{Use: "lookup", RunE: func(*cobra.Command, []string) error { return codedError{} }}
		fail := &cobra.Command{Use: "fail", RunE: func(*cobra.Command, []string) error { return errors.New("it broke") }}
		for _, c := range []*cobra.Command{lookup, fail} {
			c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
		}
		root := &cobra.Command{Use: "tool"}
		root.AddCommand(lookup, fail)
		return root
	}
	for _, tc := range []struct {
		args   string
		code   int
		stderr string
	}{
		{"lookup -json", 1, `{"error":"tool lookup: no such thing","code":"not_found"}` + "\n"},
		{"fail --json", 1, `{"error":"tool fail: it broke","code":"failed"}` + "\n"},
		{"fail -json -bogus", 2, `{"error":"tool fail: unknown flag: -bogus","code":"usage"}` + "\n"},
		{"fail -json=false", 1, "tool fail: it broke\n"},
		{"lookup", 1, "tool lookup: no such thing\n"},
	} {
		t.Run(tc.args, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := cli.Execute(t.Context(), jsonTool(), strings.Fields(tc.args), &stdout, &stderr)
			require.Equal(t, tc.code, code)
			require.Equal(t, tc.stderr, stderr.String())
			require.Empty(t, stdout.String())
		})
	}
}

func TestClosestSuggestsOnlyANearCandidate(t *testing.T) {
	names := []string{"type", "name", "namespace", "json", "data-dir"}
	for _, tc := range []struct{ word, want string }{
		{"typ", "type"},
		{"tpye", "type"}, // two letters swapped
		{"nmae", "name"},
		{"namspace", "namespace"},
		{"datadir", "data-dir"},
		{"JSON", "json"},
		{"x", ""},
		{"ty", ""}, // two letters off a four-letter word is not near
		{"volume", ""},
	} {
		require.Equal(t, tc.want, cli.Closest(tc.word, names), tc.word)
	}
}
