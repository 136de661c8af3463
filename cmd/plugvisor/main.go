// Command plugvisor runs a plugvisor agent, talks to one (plugin, volume,
// events), or runs a self-contained demo. Run `plugvisor -h` for usage.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/dockervolume/localvolume"
	cmdline "github.com/plugvisor/plugvisor/internal/cli"
	"github.com/plugvisor/plugvisor/version"
)

const rootLong = `plugvisor manages plugins that come and go at run time.

It runs an agent (state, plugin discovery and the API in ./.plugvisor), talks
to one, and serves the reference plugins. Commands that talk to an agent
find it through -data-dir (default $PLUGVISOR_DATA_DIR or ./.plugvisor).
Flags take one dash (-json) or two, and may come anywhere after the command.`

const rootExample = `  plugvisor demo
  plugvisor agent &
  plugvisor plugin list
  plugvisor help volume`

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:     "plugvisor",
		Short:   "manage plugins that come and go at run time",
		Long:    rootLong + "\n\n" + topicList(),
		Example: rootExample,
		Version: version.Get().String(),
		// The default completion command has no example; ours has.
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.AddCommand(newAgentCmd(), newPluginCmd(), newVolumeCmd(), newNodeCmd(), newSnapshotCmd(), newDockerCmd(),
		newEventsCmd(), newDemoCmd(), newDemoClusterCmd(), newEtcdCmd(), newKeyringCmd(), newTLSCmd(), newVersionCmd(), newCompletionCmd(root),
		servePlugin(hostpath.Command()), servePlugin(localvolume.Command()))
	root.AddCommand(newManCmd(root))
	root.SetHelpCommand(newHelpCmd(root))
	return root
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command line and returns the exit code: 0 on success,
// 2 for a usage error, 1 for any other failure.
func run(args []string, stdout, stderr io.Writer) int {
	return cmdline.Execute(context.Background(), newRootCmd(), args, stdout, stderr)
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "print the version, commit and Go version (also: plugvisor -version)",
		Example: "  plugvisor version\n  plugvisor -version",
		Args:    cmdline.Args("", "plugvisor version"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), version.Get().String())
			return err
		},
	}
}

func newCompletionCmd(root *cobra.Command) *cobra.Command {
	gen := map[string]func(io.Writer) error{
		"bash":       func(w io.Writer) error { return root.GenBashCompletionV2(w, true) },
		"zsh":        root.GenZshCompletion,
		"fish":       func(w io.Writer) error { return root.GenFishCompletion(w, true) },
		"powershell": root.GenPowerShellCompletionWithDesc,
	}
	return &cobra.Command{
		Use:   "completion bash|zsh|fish|powershell",
		Short: "print a shell completion script",
		Long: `Prints the completion script of a shell: commands, subcommands and flags
complete with Tab. Load it in the current shell, or install it for every one.`,
		Example: `  source <(plugvisor completion bash)
  plugvisor completion bash > /etc/bash_completion.d/plugvisor
  plugvisor completion zsh > "${fpath[1]}/_plugvisor"
  plugvisor completion fish > ~/.config/fish/completions/plugvisor.fish`,
		ValidArgs: []string{"bash", "zsh", "fish", "powershell"},
		Args:      cmdline.Args("SHELL", "plugvisor completion bash"),
		RunE: func(cmd *cobra.Command, args []string) error {
			g, ok := gen[args[0]]
			if !ok {
				return cmdline.Usagef("no completion for shell %q (want bash, zsh, fish or powershell)", args[0])
			}
			return g(cmd.OutOrStdout())
		},
	}
}

func newHelpCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:     "help [command | topic]",
		Short:   "show help for any command, or a topic: volumes, claims, fleet, tokens",
		Example: "  plugvisor help\n  plugvisor help volume create\n  plugvisor help claims",
		RunE: func(cmd *cobra.Command, args []string) error {
			if t := findTopic(args); t != nil {
				t.SetOut(cmd.OutOrStdout())
				return t.Help()
			}
			target, rest, err := root.Find(args)
			if err != nil || len(rest) > 0 {
				return cmdline.Usagef("no command %q (see plugvisor -h)", args)
			}
			target.SetOut(cmd.OutOrStdout())
			return target.Help()
		},
	}
}

// servePlugin runs a reference plugin's command as a plugvisor
// subcommand, until SIGINT or SIGTERM. Its examples name it so.
func servePlugin(cmd *cobra.Command) *cobra.Command {
	standalone := regexp.MustCompile(`(?m)^(\s+)` + regexp.QuoteMeta(cmd.Name()) + ` `)
	cmd.Example = standalone.ReplaceAllString(cmd.Example, "${1}plugvisor "+cmd.Name()+" ")
	run := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		cmd.SetContext(ctx)
		return run(cmd, args)
	}
	return cmd
}

// usageError is an error in how a command was called: exit code 2.
func usageError(format string, args ...any) error {
	return cmdline.Usagef(format, args...)
}
