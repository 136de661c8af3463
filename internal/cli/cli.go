// Package cli is what plugvisor's commands share on top of cobra: long
// flags with one dash as well as two (-json and --json), flags anywhere
// among the arguments, exit codes (0, 1 for a failure, 2 for a usage error),
// required flags and arguments checked before a command runs, and help that
// prints the usage once, with an example and the flags as they are typed.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/plugvisor/plugvisor/errclass"
)

// ErrUsage marks an error in how a command was called: exit code 2.
var ErrUsage = errclass.New(errclass.Invalid, "usage")

// Usagef returns a usage error with the message format makes.
func Usagef(format string, args ...any) error {
	return usage(fmt.Errorf(format, args...))
}

// usage returns a usage error: its text is cause's alone, and it matches
// ErrUsage as well as what cause matches.
func usage(cause error) error { return errclass.Also(cause, ErrUsage) }

// failure is an error a command's run returned that is not a usage error:
// exit code 1.
type failure struct{ err error }

func (f *failure) Error() string { return f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

// Coder is an error that names its class for scripts: the "code" of a
// JSON error ("not_found", "conflict", ...).
type Coder interface {
	Code() string
}

// The codes of errors that name none.
const (
	// CodeUsage: the command was called wrongly (exit code 2).
	CodeUsage = "usage"
	// CodeFailed: any other failure (exit code 1).
	CodeFailed = "failed"
)

// Execute runs root on args until it ends or ctx is done, prints an error to
// stderr as "<command path>: <message>", and returns the exit code: 0 on
// success or help, 2 for a usage error (an unknown command or flag, a
// missing required flag or argument), 1 for any other failure. With -json,
// the error is one JSON object on stderr, {"error": "...", "code": "..."}:
// the code is the error's (see Coder), else CodeUsage or CodeFailed.
func Execute(ctx context.Context, root *cobra.Command, args []string, stdout, stderr io.Writer) int {
	cmd, err := execute(ctx, root, args, stdout, stderr)
	if err == nil {
		return 0
	}
	code, exit, msg := CodeFailed, 1, err.Error()
	if f := (*failure)(nil); !errors.As(err, &f) {
		code, exit = CodeUsage, 2
	}
	if c := Coder(nil); errors.As(err, &c) {
		code = c.Code()
	}
	switch {
	case wantsJSON(cmd, args):
		b, _ := json.Marshal(struct {
			Error string `json:"error"`
			Code  string `json:"code"`
		}{cmd.CommandPath() + ": " + msg, code})
		fmt.Fprintf(stderr, "%s\n", b)
	case exit == 1:
		fmt.Fprintf(stderr, "%s: %s\n", cmd.CommandPath(), msg)
	default:
		fmt.Fprintf(stderr, "%s: %s\nsee: %s -h\n", cmd.CommandPath(), msg, cmd.CommandPath())
	}
	return exit
}

// wantsJSON says whether the command line asked for JSON: its -json flag
// is set, or, when the line did not parse as far as the flag, names it.
func wantsJSON(cmd *cobra.Command, args []string) bool {
	if f := cmd.Flags().Lookup("json"); f != nil && f.Changed {
		return f.Value.String() == "true"
	}
	for _, a := range args {
		if a == "-json" || a == "--json" || a == "-json=true" || a == "--json=true" {
			return true
		}
	}
	return false
}

// Run runs root on args like Execute, and returns its error instead of
// printing it: nil on success or help; a usage error satisfies
// errors.Is(err, ErrUsage).
func Run(ctx context.Context, root *cobra.Command, args []string, stdout, stderr io.Writer) error {
	_, err := execute(ctx, root, args, stdout, stderr)
	if f := (*failure)(nil); errors.As(err, &f) {
		return f.err
	}
	if err != nil && !errors.Is(err, ErrUsage) {
		return usage(err)
	}
	return err
}

func execute(ctx context.Context, root *cobra.Command, args []string, stdout, stderr io.Writer) (*cobra.Command, error) {
	Prepare(root)
	root.SetArgs(NormalizeArgs(root, args))
	root.SetOut(stdout)
	root.SetErr(stderr)
	return root.ExecuteContextC(ctx)
}

// Prepare readies root and every command under it: errors and usage are
// printed by Execute alone; flag errors and a group without its subcommand
// are usage errors; required flags are checked, naming each, before the
// command runs; help prints the usage template of this package. Execute
// calls it; tests that look at the commands' flags call it first.
func Prepare(root *cobra.Command) {
	root.SilenceErrors, root.SilenceUsage = true, true
	root.SetFlagErrorFunc(flagError)
	root.SetUsageTemplate(usageTemplate)
	root.SetHelpTemplate(helpTemplate)
	if root.Version != "" {
		root.SetVersionTemplate("{{.Version}}\n")
		root.InitDefaultVersionFlag()
	}
	cobra.AddTemplateFunc("flagUsages", FlagUsages)
	walk(root, func(c *cobra.Command) {
		if c.Annotations[prepared] != "" {
			return
		}
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[prepared] = "yes"
		c.InitDefaultHelpFlag()
		if c.HasSubCommands() && c.RunE == nil && c.Run == nil && c.HasParent() {
			group(c)
		}
		if run := c.RunE; run != nil {
			c.RunE = func(c *cobra.Command, args []string) error {
				err := run(c, args)
				if err != nil && !errors.Is(err, ErrUsage) {
					return &failure{err}
				}
				return err
			}
		}
		pre := c.PreRunE
		c.PreRunE = func(c *cobra.Command, args []string) error {
			if err := checkRequired(c); err != nil {
				return err
			}
			if pre != nil {
				return pre(c, args)
			}
			return nil
		}
	})
}

// prepared is the annotation Prepare leaves on a command it has readied.
const prepared = "plugvisor_cli_prepared"

func walk(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, sub := range c.Commands() {
		walk(sub, fn)
	}
}

// group makes a command that only holds subcommands refuse to run without
// one, or with one it does not have, naming those it has.
func group(c *cobra.Command) {
	var names []string
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() {
			names = append(names, sub.Name())
		}
	}
	want := strings.Join(names, ", ")
	// A subcommand's flag given without the subcommand is not this
	// command's error: the missing or unknown subcommand is.
	c.FParseErrWhitelist.UnknownFlags = true
	c.Args = func(_ *cobra.Command, args []string) error {
		if len(args) > 0 {
			return Usagef("unknown subcommand %q (want %s)", args[0], want)
		}
		return nil
	}
	c.RunE = func(*cobra.Command, []string) error {
		return Usagef("missing subcommand (want %s)", want)
	}
}

// Require marks the named flags of cmd required: the command refuses to run
// without them, naming each and what it is for, before it does anything.
func Require(cmd *cobra.Command, names ...string) {
	for _, name := range names {
		if err := cmd.MarkFlagRequired(name); err != nil {
			panic(err) // a flag the command does not define: a bug in the command
		}
	}
}

func checkRequired(c *cobra.Command) error {
	var missing []string
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if len(f.Annotations[cobra.BashCompOneRequiredFlag]) > 0 && !f.Changed {
			missing = append(missing, fmt.Sprintf("-%s (%s)", f.Name, f.Usage))
		}
	})
	return missingError(missing)
}

// Missing is the usage error that names those of the flags names that the
// command line of c does not set, as a flag marked with Require is named;
// nil when it sets them all. It is for flags required only in some uses.
func Missing(c *cobra.Command, names ...string) error {
	var missing []string
	for _, name := range names {
		if f := c.Flags().Lookup(name); !f.Changed {
			missing = append(missing, fmt.Sprintf("-%s (%s)", f.Name, f.Usage))
		}
	}
	return missingError(missing)
}

func missingError(missing []string) error {
	switch len(missing) {
	case 0:
		return nil
	case 1:
		return Usagef("missing required flag %s", missing[0])
	}
	return Usagef("missing required flags %s", strings.Join(missing, ", "))
}

// Args checks that a command gets exactly the arguments names lists
// ("ID ALLOC"); the error shows an example command line.
func Args(names, example string) cobra.PositionalArgs {
	want := len(strings.Fields(names))
	return func(c *cobra.Command, args []string) error {
		if len(args) == want {
			return nil
		}
		if want == 0 {
			return Usagef("%s takes no arguments, got %q", c.Name(), args)
		}
		return Usagef("%s needs %s, e.g. %s", c.Name(), names, example)
	}
}

// MinArgs checks that a command gets one argument or more, as names
// ("ID") says; the error shows an example command line.
func MinArgs(names, example string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) > 0 {
			return nil
		}
		return Usagef("%s needs %s, e.g. %s", c.Name(), names, example)
	}
}

// NormalizeArgs rewrites the long flags written with one dash (-json,
// -data-dir=d) to pflag's two (--json, --data-dir=d), so both spellings
// work. It follows the command path in args to know each flag, so that the
// value of a flag that takes one is never rewritten (-name -x keeps -x).
// One-letter flags (-h) and everything after "--" are left alone, and so is
// an argument that is a negative number.
func NormalizeArgs(root *cobra.Command, args []string) []string {
	out := make([]string, 0, len(args))
	cmd, positional := root, false
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return append(out, args[i:]...)
		case !strings.HasPrefix(a, "-") || len(a) == 2 || isNumber(a):
			if sub := subcommand(cmd, a); sub != nil && !positional {
				cmd = sub
			} else if !strings.HasPrefix(a, "-") {
				positional = true
			}
			out = append(out, a)
			continue
		case !strings.HasPrefix(a, "--"):
			a = "-" + a
		}
		out = append(out, a)
		name, _, inline := strings.Cut(a[2:], "=")
		if f := lookup(cmd, name); f != nil && !inline && f.NoOptDefVal == "" && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return out
}

func isNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

func subcommand(c *cobra.Command, name string) *cobra.Command {
	for _, sub := range c.Commands() {
		if sub.Name() == name || slices.Contains(sub.Aliases, name) {
			return sub
		}
	}
	return nil
}

func lookup(c *cobra.Command, name string) *pflag.Flag {
	if f := c.Flags().Lookup(name); f != nil {
		return f
	}
	return c.InheritedFlags().Lookup(name)
}

// FlagUsages lists fs's flags as they are typed, one dash, one a line:
// "  -size SIZE   capacity to ask for (default 1GiB)".
func FlagUsages(fs *pflag.FlagSet) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 3, ' ', 0)
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		varname, usage := pflag.UnquoteUsage(f)
		if f.NoOptDefVal != "" {
			varname = ""
		}
		name := "-" + f.Name
		if f.Shorthand != "" && f.Shorthand != f.Name {
			name = "-" + f.Shorthand + ", " + name
		}
		if varname != "" {
			name += " " + varname
		}
		if !zeroDefault(f.DefValue) {
			usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		if len(f.Annotations[cobra.BashCompOneRequiredFlag]) > 0 {
			usage += " (required)"
		}
		fmt.Fprintf(tw, "  %s\t%s\n", name, usage)
	})
	tw.Flush()
	return strings.TrimRight(b.String(), "\n")
}

func zeroDefault(v string) bool {
	switch v {
	case "", "false", "0", "[]", "0s", "map[]":
		return true
	}
	return false
}

// helpTemplate is the long description, then the usage once.
const helpTemplate = `{{with (or .Long .Short)}}{{. | trimTrailingWhitespaces}}

{{end}}{{.UsageString}}`

// usageTemplate is cobra's, with the flags as they are typed (one dash).
const usageTemplate = `Usage:{{if and .Runnable (not .HasAvailableSubCommands)}}
  {{.UseLine}}{{end}}{{if .HasAvailableSubCommands}}
  {{.CommandPath}} <command> [flags]{{end}}{{if gt (len .Aliases) 0}}

Aliases: {{.NameAndAliases}}{{end}}{{if .HasExample}}

Examples:
{{.Example}}{{end}}{{if .HasAvailableSubCommands}}

Commands:{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{end}}{{if .HasAvailableLocalFlags}}

Flags:
{{flagUsages .LocalFlags}}{{end}}{{if .HasAvailableInheritedFlags}}

Global flags:
{{flagUsages .InheritedFlags}}{{end}}{{if .HasAvailableSubCommands}}

Run "{{.CommandPath}} <command> -h" for a command's flags and examples.{{end}}
`
