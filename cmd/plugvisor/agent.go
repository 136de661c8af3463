package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	cmdline "github.com/plugvisor/plugvisor/internal/cli"
	"github.com/plugvisor/plugvisor/internal/sdnotify"
	"github.com/plugvisor/plugvisor/kubeletreg"
	"github.com/plugvisor/plugvisor/registry"
)

const agentLong = `Runs an agent in the foreground: a durable registry in <data-dir>/state.db,
plugin discovery in <data-dir>/plugins (sockets) and <data-dir>/specs (spec
files), and the API on the unix socket <data-dir>/plugvisor.sock (mode 0600).

-http also serves the API on TCP. Beyond loopback it needs TLS with client
certificates (-tls-cert, -tls-key, -tls-ca); on loopback, -token-file or TLS.
Otherwise the agent refuses to start, unless -http-insecure is given. The
token file holds one "<token> read" or "<token> write" per line, mode 0600;
clients send "Authorization: Bearer <token>".

-cluster-etcd runs the agent in cluster mode: volumes, claims and every
node's plugin health live in etcd, and each volume's claims go through one
grain of the fleet (docs/fleet.md). -node-id names
this node in the fleet; -cluster-address is where its member listens.

-config reads the same settings from an HCL file, or from every *.hcl file
of a directory: each key is a flag's name with _ for - (data_dir = "/var/lib/plugvisor"),
and a flag on the command line overrides the file. -validate checks the
flags and the file, then exits without starting. SIGHUP reads the token
file again and rereads -config to apply its log_level; other changes wait
for a restart. Under systemd
(Type=notify) the agent reports READY=1 once the API serves.

SIGINT or SIGTERM stops it cleanly. A second signal within 1s of the first
is ignored (timeout(1) and process groups deliver two); a later one forces
exit.`

const agentExample = `  plugvisor agent
  plugvisor agent -config /etc/plugvisor/agent.hcl
  plugvisor agent -config /etc/plugvisor/ -validate
  plugvisor agent -data-dir /var/lib/plugvisor -http 127.0.0.1:4646 -token-file /etc/plugvisor/tokens
  plugvisor agent -http 0.0.0.0:4646 -http-host node1.example.com \
      -tls-cert agent.pem -tls-key agent-key.pem -tls-ca clients-ca.pem -token-file tokens
  plugvisor agent -node-id n1 -cluster-etcd https://10.0.0.2:2379 -cluster-address 10.0.0.5:7946 \
      -cluster-ca fleet-ca.pem -cluster-cert n1.pem -cluster-key n1-key.pem`

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// Type names the flag's value in help.
func (s *stringList) Type() string { return "string" }

func newAgentCmd() *cobra.Command {
	var cfg agent.Config
	var socketDirs, specDirs, registrationDirs, httpHosts stringList
	var level string
	var jsonLogs bool
	var cluster clusterFlags
	var configPath string
	var validateOnly bool
	cmd := &cobra.Command{
		Use:     "agent",
		Short:   "run an agent (state, plugin discovery and the API in ./.plugvisor)",
		Long:    agentLong,
		Example: agentExample,
		Args:    cmdline.Args("", "plugvisor agent -data-dir /var/lib/plugvisor"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			fs := cmd.Flags()
			reload := &reloader{path: configPath, given: givenFlags(fs)}
			if configPath != "" {
				file, err := loadConfig(configPath, fs)
				if err != nil {
					return err
				}
				if err := file.apply(fs); err != nil {
					return err
				}
				reload.loaded = file
			}
			if err := checkNotNegative(fs); err != nil {
				return err
			}
			lvl := hclog.LevelFromString(level)
			if lvl == hclog.NoLevel {
				return usageError("-log-level %q: want trace, debug, info, warn or error", level)
			}
			cfg.SocketDirs, cfg.SpecDirs, cfg.HTTPHosts = socketDirs, specDirs, httpHosts
			cfg.RegistrationDirs = registrationDirs
			var err error
			if cfg.Cluster, err = cluster.config(cmd.Flags()); err != nil {
				return err
			}
			if validateOnly {
				return validateConfig(cfg, reload, cmd.OutOrStdout())
			}
			cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "plugvisor", Level: lvl, JSONFormat: jsonLogs, Output: cmd.ErrOrStderr()})
			reload.logger = cfg.Logger
			return runAgent(cfg, cmd.OutOrStdout(), reload)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&configPath, "config", "", "HCL config file, or a directory whose *.hcl files are read in lexical order; each key is a flag's name with _ for - (data_dir), and a flag given here overrides it (docs/agent.md)")
	fs.BoolVar(&validateOnly, "validate", false, "check the flags and -config, then exit without starting")
	fs.StringVar(&cfg.DataDir, "data-dir", agent.DefaultDataDir(), "data dir (env "+agent.DataDirEnv+")")
	fs.Var(&socketDirs, "plugin-dir", "extra directory to watch for plugin sockets (repeatable)")
	fs.Var(&specDirs, "spec-dir", "extra directory to watch for plugin spec files (repeatable)")
	fs.Var(&registrationDirs, "registration-dir", "directory to watch for kubelet's plugin registration sockets, as node-driver-registrar makes them, e.g. "+kubeletreg.KubeletDir+" (repeatable; off by default)")
	fs.BoolVar(&cfg.DockerDirs, "docker-dirs", false, "also watch Docker's plugin directories (/run/docker/plugins, /etc/docker/plugins, /usr/lib/docker/plugins), to run beside dockerd as a drop-in")
	fs.StringVar(&cfg.HTTPAddr, "http", "", "also serve the API on this TCP address, e.g. 127.0.0.1:4646 (off by default)")
	fs.Var(&httpHosts, "http-host", "a host name clients use to reach -http, accepted in the Host header (repeatable)")
	fs.StringVar(&cfg.TLSCert, "tls-cert", "", "PEM certificate of the -http listener")
	fs.StringVar(&cfg.TLSKey, "tls-key", "", "PEM private key of the -http listener")
	fs.StringVar(&cfg.TLSCA, "tls-ca", "", "PEM CA that signs the client certificates -http requires")
	fs.StringVar(&cfg.TokenFile, "token-file", "", `ACL tokens for -http: one "<token> <rights> [name]" per line, rights read, volumes, plugins, admin (comma-separated; write means admin), mode 0600`)
	fs.BoolVar(&cfg.HTTPInsecure, "http-insecure", false, "serve -http without the TLS or tokens its address needs (warns at every start)")
	fs.IntVar(&cfg.HTTPLimits.MaxConns, "http-max-conns", 256, "most open API connections per listener")
	fs.IntVar(&cfg.HTTPLimits.ReservedConns, "http-reserved-conns", 0, "of -http-max-conns, how many clients that have not yet proved themselves (token, headers and body in) may never take (default a quarter)")
	fs.IntVar(&cfg.HTTPLimits.MaxConnsPerPeer, "http-max-conns-per-peer", 0, "most connections one TCP peer (IP) holds before proving itself; beyond, its oldest is closed (default half of -http-max-conns)")
	fs.IntVar(&cfg.HTTPLimits.MaxStreams, "http-max-streams", 0, "most event streams per listener, below -http-max-conns; more are refused with 429 (default a quarter of -http-max-conns)")
	fs.DurationVar(&cfg.HTTPLimits.ReadHeaderTimeout, "http-header-timeout", 5*time.Second, "deadline of a request's headers")
	fs.DurationVar(&cfg.HTTPLimits.TLSHandshakeTimeout, "http-tls-handshake-timeout", 5*time.Second, "deadline of a TLS handshake, from connect")
	fs.IntVar(&cfg.HTTPLimits.MinBodyRate, "http-min-body-rate", 1024, "slowest a request body may arrive, in bytes a second, after -http-header-timeout")
	fs.DurationVar(&cfg.ResyncInterval, "resync-interval", 30*time.Second, "how often plugin managers resync with the registry")
	fs.DurationVar(&cfg.FingerprintInterval, "fingerprint-interval", 30*time.Second, "how often plugins are fingerprinted")
	fs.StringVar(&cfg.NodeID, "node-id", "", "this node's ID in the CSI catalog (default: host name)")
	fs.DurationVar(&cfg.VolumeStatsInterval, "volume-stats-interval", time.Minute, "how often each published volume whose node plugin advertises GET_VOLUME_STATS is asked NodeGetVolumeStats (jittered by a tenth), for the plugvisor_volume_stats_* metrics and condition events; 0 never")
	fs.DurationVar(&cfg.VolumeOperationTimeout, "volume-op-timeout", 2*time.Minute, "deadline of a whole volume operation (mount, unmount, create, delete, expand, snapshot ...): the API answers within it")
	fs.BoolVar(&cfg.ResetCorruptState, "reset-corrupt-state", false, "move a corrupt state file aside and start empty")
	fs.IntVar(&cfg.MaxPluginsPerType, "max-plugins-per-type", registry.DefaultPluginsPerType, "most allocations one plugin type may hold")
	fs.IntVar(&cfg.MaxPluginOptionsBytes, "max-plugin-options-bytes", registry.DefaultOptionsBytes, "largest total size of one plugin's options, in bytes")
	fs.IntVar(&cfg.MaxSubscribers, "max-subscribers", registry.DefaultSubscribers, "most event subscriptions (API event streams among them) open at once")
	fs.IntVar(&cfg.BodyLimits.Secrets, "max-secrets", api.DefaultMaxSecrets, "most secrets in one request body (more answers 413)")
	fs.IntVar(&cfg.BodyLimits.Parameters, "max-parameters", api.DefaultMaxParameters, "most parameters in one request body (more answers 413)")
	fs.IntVar(&cfg.BodyLimits.TopologySegments, "max-topology-segments", api.DefaultMaxTopologySegments, "most topology segments in one request body, every topology's together (more answers 413)")
	fs.IntVar(&cfg.BodyLimits.MountFlags, "max-mount-flags", api.DefaultMaxMountFlags, "most mount flags in one request body (more answers 413)")
	fs.IntVar(&cfg.MaxVolumes, "max-volumes", model.DefaultMaxVolumes, "most volumes the CSI catalog holds, every namespace together")
	fs.StringVar(&level, "log-level", "info", "log level: trace, debug, info, warn, error")
	fs.BoolVar(&jsonLogs, "log-json", false, "log as JSON")
	cluster.add(fs)
	return cmd
}

// checkNotNegative refuses, naming the flag, a negative value of any
// count or duration flag of the agent, none of which takes one. The
// cluster flags have checks of their own (clusterFlags.checkDurations).
func checkNotNegative(fs *pflag.FlagSet) error {
	var problems []error
	fs.VisitAll(func(f *pflag.Flag) {
		if strings.HasPrefix(f.Name, "cluster-") {
			return
		}
		switch f.Value.Type() {
		case "int", "duration":
			if strings.HasPrefix(f.Value.String(), "-") {
				problems = append(problems, fmt.Errorf("-%s is %s: give 0 or more (plugvisor agent -h says what 0 means)", f.Name, f.Value))
			}
		}
	})
	if len(problems) > 0 {
		return usageError("%w", errors.Join(problems...))
	}
	return nil
}

// runAgent runs an agent until SIGINT or SIGTERM, then shuts it down.
// SIGHUP reloads what reload can change while the agent runs. Under
// systemd (Type=notify), it says when the API serves, reloads and stops.
func runAgent(cfg agent.Config, stdout io.Writer, reload *reloader) error {
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(signals)
	hangups := make(chan os.Signal, 1)
	signal.Notify(hangups, syscall.SIGHUP)
	defer signal.Stop(hangups)

	a, err := agent.Start(cfg)
	if err != nil {
		return err
	}
	if cfg.TokenFile != "" {
		reload.tokens = a.ReloadTokens
	}
	running := fmt.Sprintf("API on %s; drop plugins into %s", a.SocketPath(), a.PluginDir())
	fmt.Fprintf(stdout, "plugvisor agent running: %s\n", running)
	notify(cfg.Logger, sdnotify.Ready, sdnotify.Status(running))
	var sig os.Signal
	for sig == nil {
		select {
		case <-hangups:
			notify(cfg.Logger, sdnotify.Reloading())
			reload.reload()
			notify(cfg.Logger, sdnotify.Ready, sdnotify.Status(running))
		case sig = <-signals:
		}
	}
	notify(cfg.Logger, sdnotify.Stopping)
	cfg.Logger.Info("shutting down", "signal", sig.String())
	go forceExitOnLaterSignal(signals, time.Now(), time.Now, cfg.Logger, func() { os.Exit(1) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return a.Shutdown(ctx)
}

// signalGrace is how long after the first signal a second one is taken as
// the same request: timeout(1), and a terminal's Ctrl-C to a process
// group, deliver the signal twice within a millisecond.
const signalGrace = time.Second

// forceExitOnLaterSignal reads the signals that follow the first, received
// at first: one within signalGrace is ignored; a later one calls exit.
func forceExitOnLaterSignal(signals <-chan os.Signal, first time.Time, now func() time.Time, log hclog.Logger, exit func()) {
	for sig := range signals {
		if since := now().Sub(first); since < signalGrace {
			log.Info("ignoring a repeated signal: shutdown is under way; signal again after 1s to force exit",
				"signal", sig.String(), "after", since)
			continue
		}
		log.Warn("second signal: exiting now, without a clean shutdown", "signal", sig.String())
		exit()
		return
	}
}
