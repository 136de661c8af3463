package main

import (
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/plugvisor/plugvisor/fleet/embedded"
	cmdline "github.com/plugvisor/plugvisor/internal/cli"
)

func newEtcdCmd() *cobra.Command {
	var dir, client, peer string
	var retention time.Duration
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "run one etcd member on loopback, to try a fleet on one machine",
		Long: `Runs one etcd member inside plugvisor, in the foreground, until SIGINT or
SIGTERM: enough to try cluster mode with several agents on one machine. It
serves plain HTTP on loopback only and refuses any other address. A fleet
across machines runs a real etcd cluster with TLS (Debian: apt-get install
etcd-server), and the agents reach it with -cluster-etcd-ca, -cluster-etcd-cert
and -cluster-etcd-key.

It compacts its revision history by itself, keeping -auto-compaction-retention
of it (5m, as the Kubernetes apiserver). Back it up with plugvisor etcd snapshot
save, and shrink its file after compaction with plugvisor etcd defrag
(docs/fleet-operations.md).`,
		Example: "  plugvisor etcd -data-dir /tmp/fleet/etcd\n  plugvisor etcd -listen http://127.0.0.1:12379 -peer http://127.0.0.1:12380",
		Args:    cmdline.Args("", "plugvisor etcd -data-dir /tmp/fleet/etcd"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := url.Parse(client)
			if err != nil {
				return usageError("-listen %q: %v", client, err)
			}
			p, err := url.Parse(peer)
			if err != nil {
				return usageError("-peer %q: %v", peer, err)
			}
			if retention < 0 {
				return usageError("-auto-compaction-retention %v: give a positive duration, e.g. 5m, or 0 for none", retention)
			}
			if retention == 0 {
				retention = -1 // embedded: negative is none
			}
			e, err := embedded.Start(embedded.Config{Dir: dir, Client: c, Peer: p, CompactionRetention: retention})
			if err != nil {
				return err
			}
			signals := make(chan os.Signal, 1)
			signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
			defer signal.Stop(signals)
			fmt.Fprintf(cmd.OutOrStdout(), "etcd ready: -cluster-etcd %s (data in %s; plain HTTP on loopback, for trying a fleet)\n", c, dir)
			select {
			case <-signals:
			case err = <-e.Err():
			}
			embedded.Stop(e, time.Second)
			return err
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&dir, "data-dir", ".plugvisor-etcd", "the member's data directory")
	fs.StringVar(&client, "listen", "http://127.0.0.1:2379", "client URL, on loopback: the agents' -cluster-etcd")
	fs.StringVar(&peer, "peer", "http://127.0.0.1:2380", "peer URL, on loopback")
	fs.DurationVar(&retention, "auto-compaction-retention", embedded.DefaultCompactionRetention,
		"the revision history kept: older revisions are compacted (0: never, and the db grows until etcd's quota refuses writes)")
	cmd.AddCommand(newEtcdSnapshotCmd(), newEtcdDefragCmd())
	return cmd
}
