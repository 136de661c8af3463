package main

import (
	"cmp"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/plugvisor/plugvisor/fleet/embedded"
	cmdline "github.com/plugvisor/plugvisor/internal/cli"
)

const etcdLong = `Runs one etcd member inside plugvisor, in the foreground, until SIGINT or
SIGTERM: enough to try cluster mode, or to serve a small fleet that can
live with one etcd (no quorum: when it stops, claims wait). A fleet that
must survive the loss of a machine runs an etcd cluster of three or five
members (Debian: apt-get install etcd-server), with the same certificates.

It serves TLS on its client (-listen) and peer (-peer) URLs, and requires
every client and peer to present a certificate that -ca signed: make them
with plugvisor tls (ca create, then cert create -etcd for -cert and -key,
-agent NODE for each agent, -cli for the commands below). The agents reach
it with -cluster-etcd-ca, -cluster-etcd-cert and -cluster-etcd-key.
-insecure serves plain HTTP instead, on loopback only, and warns at every
start: every process on the host can then read and write the fleet's state.

It compacts its revision history by itself, keeping -auto-compaction-retention
of it (5m, as the Kubernetes apiserver). Back it up with plugvisor etcd snapshot
save, and shrink its file after compaction with plugvisor etcd defrag
(docs/fleet-operations.md).`

const etcdExample = `  plugvisor tls ca create -dir tls && plugvisor tls cert create -dir tls -etcd
  plugvisor etcd -data-dir /var/lib/plugvisor-etcd -ca tls/ca.pem -cert tls/etcd.pem -key tls/etcd-key.pem
  plugvisor etcd -listen https://10.0.0.2:2379 -peer https://10.0.0.2:2380 -ca tls/ca.pem -cert tls/etcd.pem -key tls/etcd-key.pem
  plugvisor etcd -insecure -data-dir /tmp/fleet/etcd`

// etcdFlags are plugvisor etcd's flags.
type etcdFlags struct {
	dir, client, peer string
	ca, cert, key     string
	peerCert, peerKey string
	insecure          bool
	retention         time.Duration
}

func newEtcdCmd() *cobra.Command {
	var f etcdFlags
	cmd := &cobra.Command{
		Use:     "etcd",
		Short:   "run one etcd member, with TLS and client certificates, to try or serve a small fleet",
		Long:    etcdLong,
		Example: etcdExample,
		Args:    cmdline.Args("", "plugvisor etcd -data-dir /tmp/fleet/etcd -ca tls/ca.pem -cert tls/etcd.pem -key tls/etcd-key.pem"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.config()
			if err != nil {
				return err
			}
			if f.insecure {
				fmt.Fprintf(cmd.ErrOrStderr(), "INSECURE: plugvisor etcd -insecure serves plain HTTP without client certificates on %s: "+
					"every process on this host can read the fleet's state, volume secrets included, and forge its claims; "+
					"give -ca, -cert and -key instead (plugvisor tls makes them)\n", cfg.Client)
			}
			e, err := embedded.Start(cfg)
			if err != nil {
				return err
			}
			signals := make(chan os.Signal, 1)
			signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
			defer signal.Stop(signals)
			how := "TLS; clients need a certificate signed by " + f.ca
			if f.insecure {
				how = "plain HTTP on loopback, for trying a fleet"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "etcd ready: -cluster-etcd %s (data in %s; %s)\n", cfg.Client, f.dir, how)
			select {
			case <-signals:
			case err = <-e.Err():
			}
			embedded.Stop(e, time.Second)
			return err
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.dir, "data-dir", ".plugvisor-etcd", "the member's data directory")
	fs.StringVar(&f.client, "listen", "", "client URL: the agents' -cluster-etcd (default https://127.0.0.1:2379; with -insecure, http://127.0.0.1:2379)")
	fs.StringVar(&f.peer, "peer", "", "peer URL (default https://127.0.0.1:2380; with -insecure, http://127.0.0.1:2380)")
	fs.StringVar(&f.ca, "ca", "", "PEM CA that signs every client's and peer's certificate (plugvisor tls ca create)")
	fs.StringVar(&f.cert, "cert", "", "PEM certificate of the member, server and client use, naming the hosts of -listen and -peer (plugvisor tls cert create -etcd)")
	fs.StringVar(&f.key, "key", "", "PEM private key of -cert")
	fs.StringVar(&f.peerCert, "peer-cert", "", "PEM certificate for the peer URL, when not -cert")
	fs.StringVar(&f.peerKey, "peer-key", "", "PEM private key of -peer-cert")
	fs.BoolVar(&f.insecure, "insecure", false, "serve plain HTTP without client certificates, on loopback only (warned at every start)")
	fs.DurationVar(&f.retention, "auto-compaction-retention", embedded.DefaultCompactionRetention,
		"the revision history kept: older revisions are compacted (0: never, and the db grows until etcd's quota refuses writes)")
	cmd.AddCommand(newEtcdSnapshotCmd(), newEtcdDefragCmd())
	return cmd
}

// config is the member's config, or a usage error naming the flags to fix.
func (f *etcdFlags) config() (embedded.Config, error) {
	if f.retention < 0 {
		return embedded.Config{}, usageError("-auto-compaction-retention %v: give a positive duration, e.g. 5m, or 0 for none", f.retention)
	}
	scheme := "https"
	tlsFlags := []struct{ flag, value string }{{"-ca", f.ca}, {"-cert", f.cert}, {"-key", f.key}, {"-peer-cert", f.peerCert}, {"-peer-key", f.peerKey}}
	if f.insecure {
		scheme = "http"
		var set []string
		for _, t := range tlsFlags {
			if t.value != "" {
				set = append(set, t.flag)
			}
		}
		if len(set) > 0 {
			return embedded.Config{}, usageError("-insecure serves plain HTTP, so it takes no %s: leave out -insecure to serve TLS", strings.Join(set, ", "))
		}
	} else {
		var missing []string
		for _, t := range tlsFlags[:3] {
			if t.value == "" {
				missing = append(missing, t.flag)
			}
		}
		if len(missing) > 0 {
			return embedded.Config{}, usageError("plugvisor etcd serves TLS with client certificates: give %s (plugvisor tls ca create, then plugvisor tls cert create -etcd, make them), "+
				"or -insecure to try plain HTTP on loopback", strings.Join(missing, ", "))
		}
		if (f.peerCert == "") != (f.peerKey == "") {
			return embedded.Config{}, usageError("-peer-cert and -peer-key go together")
		}
	}
	cfg := embedded.Config{Dir: f.dir, CompactionRetention: f.retention}
	var err error
	if cfg.Client, err = etcdURL("-listen", cmp.Or(f.client, scheme+"://127.0.0.1:2379"), scheme); err != nil {
		return cfg, err
	}
	if cfg.Peer, err = etcdURL("-peer", cmp.Or(f.peer, scheme+"://127.0.0.1:2380"), scheme); err != nil {
		return cfg, err
	}
	if f.retention == 0 {
		cfg.CompactionRetention = -1 // embedded: negative is none
	}
	if !f.insecure {
		cfg.TLS = &embedded.TLS{CA: f.ca, Cert: f.cert, Key: f.key, PeerCert: f.peerCert, PeerKey: f.peerKey}
	}
	return cfg, nil
}

// etcdURL parses flag's URL, which must have scheme.
func etcdURL(flag, value, scheme string) (*url.URL, error) {
	u, err := url.Parse(value)
	if err != nil {
		return nil, usageError("%s %q: %v", flag, value, err)
	}
	if u.Scheme != scheme || u.Host == "" {
		if scheme == "https" {
			return nil, usageError("%s %s: plugvisor etcd serves TLS: give https://HOST:PORT (http:// only with -insecure, on loopback)", flag, value)
		}
		return nil, usageError("%s %s: -insecure serves plain HTTP: give http://127.0.0.1:PORT", flag, value)
	}
	return u, nil
}
