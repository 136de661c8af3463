package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/embedded"
	cmdline "github.com/plugvisor/plugvisor/internal/cli"
)

// etcdClientFlags say which etcd an operator's command reaches.
type etcdClientFlags struct {
	endpoints          string
	ca, cert, key      string
	user, passwordFile string
	commandTimeout     time.Duration
}

func (f *etcdClientFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.endpoints, "endpoints", "https://127.0.0.1:2379", "etcd client URLs, comma-separated (the agents' -cluster-etcd); http:// on loopback only")
	fs.StringVar(&f.ca, "etcd-ca", "", "PEM CA that signs etcd's server certificate")
	fs.StringVar(&f.cert, "etcd-cert", "", "PEM client certificate for etcd")
	fs.StringVar(&f.key, "etcd-key", "", "PEM private key of -etcd-cert")
	fs.StringVar(&f.user, "etcd-username", "", "etcd user, for an etcd with auth enabled (with -etcd-password-file; a snapshot or a defragmentation needs the root role)")
	fs.StringVar(&f.passwordFile, "etcd-password-file", "", "file holding -etcd-username's password on its first line, mode 0600")
	fs.DurationVar(&f.commandTimeout, "timeout", 5*time.Minute, "how long the command may take")
}

// run runs op with the etcd access the flags give, and a context that
// ends at -timeout, or at SIGINT or SIGTERM.
func (f *etcdClientFlags) run(cmd *cobra.Command, op func(ctx context.Context, a fleet.Access) error) error {
	var tlsConfig *tls.Config
	if f.ca != "" || f.cert != "" || f.key != "" {
		var err error
		if tlsConfig, err = tlsPair("etcd", f.ca, f.cert, f.key, true); err != nil {
			return err
		}
	}
	endpoints := strings.Split(f.endpoints, ",")
	switch r := agent.ReachEtcd(endpoints, tlsConfig != nil); {
	case r.Mixed:
		return usageError("-endpoints mixes plain and TLS URLs (plain: %s): etcd's client reaches every one as the first; give https:// to all", strings.Join(r.Plain, ", "))
	case len(r.Remote) > 0:
		return usageError("-endpoints %s is plain HTTP off this host, where anyone on the network could read the fleet's secrets: give https:// URLs with -etcd-ca, -etcd-cert and -etcd-key",
			strings.Join(r.Remote, ", "))
	}
	a := fleet.Access{Endpoints: endpoints, TLS: tlsConfig, Username: f.user}
	switch {
	case (f.user == "") != (f.passwordFile == ""):
		return usageError("-etcd-username and -etcd-password-file go together: the user, and the file that holds its password")
	case f.passwordFile != "":
		var err error
		if a.Password, err = readPasswordFile("-etcd-password-file", f.passwordFile); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, f.commandTimeout)
	defer cancel()
	return op(ctx, a)
}

func newEtcdSnapshotCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "back up the fleet's etcd to a file, and restore it into a new data directory",
		Long: `A snapshot holds every key of the fleet: volumes, claims, attachments, and
the index the GC reads. Save one from a live etcd at any time; restore it
into a new data directory, and start etcd on that directory (docs/fleet-operations.md).`,
		Example: "  plugvisor etcd snapshot save -etcd-ca ca.pem -etcd-cert cli.pem -etcd-key cli-key.pem /backup/fleet-$(date +%F).db\n" +
			"  plugvisor etcd snapshot restore /backup/fleet-2026-11-26.db -data-dir /var/lib/fleet-etcd-restored",
		Args: cmdline.Args("", "plugvisor etcd snapshot save FILE"),
	}
	cmd.AddCommand(newEtcdSnapshotSaveCmd(), newEtcdSnapshotRestoreCmd())
	return cmd
}

func newEtcdSnapshotSaveCmd() *cobra.Command {
	var f etcdClientFlags
	cmd := &cobra.Command{
		Use:   "save FILE",
		Short: "write a snapshot of the fleet's etcd into FILE",
		Long: `Writes a snapshot of the etcd at -endpoints (the first that answers) into
FILE, which must not exist: it is written as FILE.part, synced, then renamed.`,
		Example: "  plugvisor etcd snapshot save -etcd-ca ca.pem -etcd-cert cli.pem -etcd-key cli-key.pem /backup/fleet.db\n" +
			"  plugvisor etcd snapshot save -endpoints https://10.0.0.2:2379 -etcd-ca ca.pem -etcd-cert cli.pem -etcd-key cli-key.pem /backup/fleet.db",
		Args: cmdline.Args("FILE", "plugvisor etcd snapshot save /backup/fleet.db"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.run(cmd, func(ctx context.Context, a fleet.Access) error {
				size, err := fleet.SaveSnapshot(ctx, a, args[0])
				if err == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "saved a snapshot of %d bytes into %s\n", size, args[0])
				}
				return err
			})
		},
	}
	f.add(cmd.Flags())
	return cmd
}

func newEtcdSnapshotRestoreCmd() *cobra.Command {
	var dir, peer string
	cmd := &cobra.Command{
		Use:   "restore FILE",
		Short: "make a new data directory for plugvisor etcd from a snapshot",
		Long: `Restores the snapshot FILE into -data-dir, which must not exist, for a
plugvisor etcd with the same -peer. Start it with plugvisor etcd -data-dir DIR;
the agents then find their volumes and claims as they were at the snapshot.
For an etcd cluster of your own, use etcdutl snapshot restore on each member.`,
		Example: "  plugvisor etcd snapshot restore /backup/fleet.db -data-dir /tmp/fleet/etcd-restored\n" +
			"  plugvisor etcd -data-dir /tmp/fleet/etcd-restored -ca ca.pem -cert etcd.pem -key etcd-key.pem",
		Args: cmdline.Args("FILE", "plugvisor etcd snapshot restore /backup/fleet.db -data-dir /tmp/fleet/etcd-restored"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				return usageError("-data-dir is required: the new data directory, e.g. -data-dir /tmp/fleet/etcd-restored")
			}
			p, err := url.Parse(peer)
			if err != nil {
				return usageError("-peer %q: %v", peer, err)
			}
			if err := embedded.Restore(args[0], dir, p); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "restored %s into %s: start it with plugvisor etcd -data-dir %s -peer %s\n", args[0], dir, dir, p)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&dir, "data-dir", "", "the new data directory (it must not exist)")
	fs.StringVar(&peer, "peer", "https://127.0.0.1:2380", "peer URL of the plugvisor etcd that will run on it (http:// for one with -insecure, on loopback)")
	return cmd
}

func newEtcdDefragCmd() *cobra.Command {
	var f etcdClientFlags
	cmd := &cobra.Command{
		Use:   "defrag",
		Short: "return to the file system the space that compaction freed in etcd's db",
		Long: `Defragments the db of each member at -endpoints, one after the other, and
prints each db's size before and after. Compaction (plugvisor etcd's
-auto-compaction-retention, or the agents' -cluster-compact-interval) frees
space inside the db for new revisions; only a defragmentation shrinks the
file. A member answers nothing while it defragments: do it at a quiet hour.`,
		Example: "  plugvisor etcd defrag -etcd-ca ca.pem -etcd-cert cli.pem -etcd-key cli-key.pem\n" +
			"  plugvisor etcd defrag -endpoints https://10.0.0.2:2379,https://10.0.0.3:2379 -etcd-ca ca.pem -etcd-cert cli.pem -etcd-key cli-key.pem",
		Args: cmdline.Args("", "plugvisor etcd defrag -etcd-ca ca.pem -etcd-cert cli.pem -etcd-key cli-key.pem"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.run(cmd, func(ctx context.Context, all fleet.Access) error {
				for _, ep := range all.Endpoints {
					a := all
					a.Endpoints = []string{ep}
					before, _, err := fleet.DBSize(ctx, a)
					if err == nil {
						err = fleet.Defragment(ctx, a)
					}
					if err != nil {
						return err
					}
					after, _, err := fleet.DBSize(ctx, a)
					if err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%s: db %d bytes before, %d after\n", ep, before, after)
				}
				return nil
			})
		},
	}
	f.add(cmd.Flags())
	return cmd
}
