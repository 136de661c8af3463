// Command plugvisor runs a plugvisor agent, talks to one (plugin, volume,
// events), or runs a self-contained demo. Run `plugvisor help` for usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/dockervolume/localvolume"
)

const usage = `plugvisor manages plugins that come and go at run time.

Usage:
  plugvisor <command> [flags] [args]

Commands:
  agent       run an agent (state, plugin discovery and the API in ./.plugvisor)
  plugin      list, inspect, register and deregister plugins
  volume      create, register, list, inspect, mount, unmount, expand and delete CSI volumes
  snapshot    create, list and delete CSI snapshots
  docker      Docker volumes (create, ls, inspect, rm, mount, unmount, path) and discovered plugins
  events      follow the agent's plugin events as they happen
  demo        run a self-contained demo in a temp dir
  help        show this help, or a command's: plugvisor help plugin

Reference plugins (the demo runs them; so can you):
  hostpath-csi          a hostpath CSI plugin: plugvisor hostpath-csi -h
  docker-volume-plugin  a Docker volume plugin: plugvisor docker-volume-plugin -h

Every command takes -h. Commands that talk to an agent find it through
-data-dir (default $PLUGVISOR_DATA_DIR or ./.plugvisor).

Try:
  plugvisor demo
  plugvisor agent &
  plugvisor plugin list
`

// command is one subcommand: run parses its own flags from args.
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

func commands() map[string]command {
	return map[string]command{
		"agent":    {"run an agent", runAgent},
		"plugin":   {"manage plugins", runPlugin},
		"volume":   {"manage CSI volumes", runVolume},
		"snapshot": {"manage CSI snapshots", runSnapshot},
		"docker":   {"manage Docker volumes and see discovered plugins", runDocker},
		"demo":     {"run the demo", runDemo},
		"events":   {"follow plugin events", runEvents},
		"hostpath-csi": {"serve the reference hostpath CSI plugin", func(args []string, _, stderr io.Writer) error {
			return servePlugin(hostpath.Run, args, stderr)
		}},
		"docker-volume-plugin": {"serve the reference Docker volume plugin", func(args []string, _, stderr io.Writer) error {
			return servePlugin(localvolume.Run, args, stderr)
		}},
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command line and returns the exit code: 0 on success,
// 2 for a usage error, 1 for any other failure.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		if len(args) > 1 {
			return run([]string{args[1], "-h"}, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return 0
	}
	cmd, ok := commands()[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "plugvisor: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	err := cmd.run(args[1:], stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "plugvisor %s: %v\n", args[0], strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
		return 2
	default:
		fmt.Fprintf(stderr, "plugvisor %s: %v\n", args[0], err)
		return 1
	}
}

// servePlugin runs a reference plugin's command until SIGINT or SIGTERM.
func servePlugin(run func(context.Context, []string, io.Writer) error, args []string, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, args, stderr)
}

// errUsage marks an error in how a command was called.
var errUsage = errors.New("usage")

func usageError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, args...))
}

// newFlags returns a flag set whose -h prints help, an example, and the
// flags, to stdout.
func newFlags(name, help string, stdout io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("plugvisor "+name, flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.Usage = func() {
		fmt.Fprintf(stdout, "%s\n\nFlags:\n", strings.TrimSpace(help))
		fs.PrintDefaults()
	}
	return fs
}

// subcommand splits args into a subcommand and its arguments. With no
// subcommand it prints help and returns a usage error; with -h, help and
// flag.ErrHelp.
func subcommand(args []string, help string, stdout io.Writer) (string, []string, error) {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(stdout, help)
		if len(args) == 0 {
			return "", nil, usageError("missing subcommand")
		}
		return "", nil, flag.ErrHelp
	}
	return args[0], args[1:], nil
}

// parse parses args, turning flag errors into usage errors. Flags may come
// before, between or after positional arguments (plugin status
// docker-volume x -data-dir d); after "--" everything is positional.
func parse(fs *flag.FlagSet, args []string) error {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return usageError("%v (see -h)", err)
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); len(rest) == 0 || consumed > 0 && args[consumed-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional, args = append(positional, rest[0]), rest[1:]
	}
	// Parsing "--" first leaves fs.Args() holding exactly the positional arguments.
	return fs.Parse(append([]string{"--"}, positional...))
}
