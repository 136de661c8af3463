package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/registry"
)

const agentHelp = `Usage: plugvisor agent [flags]

Runs an agent in the foreground: a durable registry in <data-dir>/state.db,
plugin discovery in <data-dir>/plugins (sockets) and <data-dir>/specs (spec
files), and the API on the unix socket <data-dir>/plugvisor.sock (mode 0600).
SIGINT or SIGTERM stops it cleanly; a second signal forces exit.

Example:
  plugvisor agent -data-dir /var/lib/plugvisor -http 127.0.0.1:4646 -log-level debug`

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func runAgent(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("agent", agentHelp, stdout)
	var cfg agent.Config
	var socketDirs, specDirs stringList
	fs.StringVar(&cfg.DataDir, "data-dir", agent.DefaultDataDir(), "data dir (env "+agent.DataDirEnv+")")
	fs.Var(&socketDirs, "plugin-dir", "extra directory to watch for plugin sockets (repeatable)")
	fs.Var(&specDirs, "spec-dir", "extra directory to watch for plugin spec files (repeatable)")
	fs.StringVar(&cfg.HTTPAddr, "http", "", "also serve the API on this TCP address, e.g. 127.0.0.1:4646 (off by default)")
	fs.DurationVar(&cfg.ResyncInterval, "resync-interval", 30*time.Second, "how often plugin managers resync with the registry")
	fs.DurationVar(&cfg.FingerprintInterval, "fingerprint-interval", 30*time.Second, "how often plugins are fingerprinted")
	fs.StringVar(&cfg.NodeID, "node-id", "", "this node's ID in the CSI catalog (default: host name)")
	fs.BoolVar(&cfg.ResetCorruptState, "reset-corrupt-state", false, "move a corrupt state file aside and start empty")
	fs.IntVar(&cfg.MaxPluginsPerType, "max-plugins-per-type", registry.DefaultPluginsPerType, "most allocations one plugin type may hold")
	fs.IntVar(&cfg.MaxPluginOptionsBytes, "max-plugin-options-bytes", registry.DefaultOptionsBytes, "largest total size of one plugin's options, in bytes")
	fs.IntVar(&cfg.MaxSubscribers, "max-subscribers", registry.DefaultSubscribers, "most event subscriptions (API event streams among them) open at once")
	level := fs.String("log-level", "info", "log level: trace, debug, info, warn, error")
	jsonLogs := fs.Bool("log-json", false, "log as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("unexpected arguments %q", fs.Args())
	}
	lvl := hclog.LevelFromString(*level)
	if lvl == hclog.NoLevel {
		return usageError("-log-level %q: want trace, debug, info, warn or error", *level)
	}
	cfg.SocketDirs, cfg.SpecDirs = socketDirs, specDirs
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "plugvisor", Level: lvl, JSONFormat: *jsonLogs, Output: stderr})

	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(signals)

	a, err := agent.Start(cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "plugvisor agent running: API on %s; drop plugins into %s\n", a.SocketPath(), a.PluginDir())
	sig := <-signals
	cfg.Logger.Info("shutting down", "signal", sig.String())
	go func() {
		sig := <-signals
		cfg.Logger.Warn("second signal: exiting now", "signal", sig.String())
		os.Exit(1)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return a.Shutdown(ctx)
}
