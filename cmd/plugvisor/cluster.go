package main

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/member"
	"github.com/plugvisor/plugvisor/names"
)

// clusterFlags are the agent's flags of cluster mode.
type clusterFlags struct {
	etcd                       string
	etcdCA, etcdCert, etcdKey  string
	etcdUser, etcdPasswordFile string
	address, advertise         string
	ca, cert, key              string
	insecure                   bool
	name, prefix               string
	leaseTTL                   time.Duration
	gcInterval, gcGrace        time.Duration
	fenceMargin                time.Duration
	compactInterval            time.Duration
	keyring                    string
	acceptUnsealed             bool
}

func (f *clusterFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.etcd, "cluster-etcd", "", "cluster mode: etcd client URLs, comma-separated, e.g. https://10.0.0.2:2379,https://10.0.0.3:2379 (off by default: one node, bbolt)")
	fs.StringVar(&f.etcdCA, "cluster-etcd-ca", "", "PEM CA that signs etcd's server certificate")
	fs.StringVar(&f.etcdCert, "cluster-etcd-cert", "", "PEM client certificate for etcd")
	fs.StringVar(&f.etcdKey, "cluster-etcd-key", "", "PEM private key of -cluster-etcd-cert")
	fs.StringVar(&f.etcdUser, "cluster-etcd-username", "", "etcd user, for an etcd with auth enabled (with -cluster-etcd-password-file)")
	fs.StringVar(&f.etcdPasswordFile, "cluster-etcd-password-file", "", "file holding -cluster-etcd-username's password on its first line, mode 0600 (never on the command line)")
	fs.StringVar(&f.address, "cluster-address", "", "host:port this agent's cluster member listens on and the others dial, e.g. 10.0.0.5:7946 (required in cluster mode)")
	fs.StringVar(&f.keyring, "cluster-keyring", "", "the fleet's keyring file (plugvisor keyring generate), the same on every agent: seals the fleet's records in etcd (secrets encrypted, records authenticated) and signs the members' requests")
	fs.BoolVar(&f.acceptUnsealed, "cluster-keyring-accept-unsealed", false, "while a fleet moves to a keyring, read records the keyring did not seal, until plugvisor keyring rotate has sealed them all")
	fs.StringVar(&f.advertise, "cluster-advertise", "", "host:port the other members dial, when not -cluster-address (behind a NAT or a proxy), e.g. 203.0.113.5:7946")
	fs.StringVar(&f.ca, "cluster-ca", "", "PEM CA that signs every member's certificate (members talk over mutual TLS)")
	fs.StringVar(&f.cert, "cluster-cert", "", "PEM certificate of this member, for -cluster-address (server and client use)")
	fs.StringVar(&f.key, "cluster-key", "", "PEM private key of -cluster-cert")
	fs.BoolVar(&f.insecure, "cluster-insecure", false, "let members talk without TLS; only on a loopback -cluster-address, and warned at every start")
	fs.StringVar(&f.name, "cluster-name", "", `separates fleets that share one etcd (default "plugvisor")`)
	fs.StringVar(&f.prefix, "cluster-prefix", "", `etcd key prefix of the fleet's state (default "/plugvisor/")`)
	fs.DurationVar(&f.leaseTTL, "cluster-lease-ttl", 0, "how long a node that stops renewing still counts as up (default 10s; whole seconds, at least 2s)")
	fs.DurationVar(&f.gcInterval, "cluster-gc-interval", 0, "turns on this node's part in the fleet's one GC, which frees the claims of nodes that are down: how often the leader looks again at the down nodes, and this node at the attachments they strand (default 0: no GC here)")
	fs.DurationVar(&f.gcGrace, "cluster-gc-grace", 0, "how long a node must be down before its claims are freed (default 5m); longer than -cluster-lease-ttl plus -cluster-fence-margin")
	fs.DurationVar(&f.fenceMargin, "cluster-fence-margin", 0, "how long a node cut off from etcd may take to make its writers read-only once its lease may be lost (default 5s)")
	fs.DurationVar(&f.compactInterval, "cluster-compact-interval", fleet.DefaultCompactInterval,
		"how often one member of the fleet compacts etcd's revision history, keeping about that much history (0: never; leave it to etcd's -auto-compaction-retention)")
}

// config is the agent's cluster config, nil without -cluster-etcd. Any
// other cluster flag without it is a usage error, and so is a member
// address with neither TLS nor -cluster-insecure on loopback.
func (f *clusterFlags) config(fs *pflag.FlagSet) (*agent.ClusterConfig, error) {
	if f.etcd == "" {
		var given []string
		fs.Visit(func(fl *pflag.Flag) {
			if strings.HasPrefix(fl.Name, "cluster-") {
				given = append(given, "-"+fl.Name)
			}
		})
		if len(given) > 0 {
			return nil, usageError("%s needs -cluster-etcd: cluster mode starts with the etcd URLs", strings.Join(given, ", "))
		}
		return nil, nil
	}
	if f.address == "" {
		return nil, usageError("-cluster-address is required in cluster mode: the host:port this member listens on, e.g. 10.0.0.5:7946")
	}
	if err := f.checkDurations(); err != nil {
		return nil, err
	}
	c := &agent.ClusterConfig{Etcd: strings.Split(f.etcd, ","), Address: f.address, Advertise: f.advertise, ClusterName: f.name, Prefix: f.prefix,
		LeaseTTL: f.leaseTTL, GCInterval: f.gcInterval, GCGrace: f.gcGrace, FenceMargin: f.fenceMargin, CompactInterval: f.compactInterval}
	var err error
	if f.keyring != "" {
		if c.Keyring, err = fleet.LoadKeyring(f.keyring); err != nil {
			return nil, fmt.Errorf("-cluster-keyring: %w", err)
		}
		c.AcceptUnsealed = f.acceptUnsealed
	} else if f.acceptUnsealed {
		return nil, usageError("-cluster-keyring-accept-unsealed needs -cluster-keyring: it is for a fleet moving to a keyring")
	}
	if f.etcdCA != "" || f.etcdCert != "" || f.etcdKey != "" {
		if c.EtcdTLS, err = tlsPair("cluster-etcd", f.etcdCA, f.etcdCert, f.etcdKey, true); err != nil {
			return nil, err
		}
	}
	if (f.etcdUser == "") != (f.etcdPasswordFile == "") {
		return nil, usageError("-cluster-etcd-username and -cluster-etcd-password-file go together: the user, and the file that holds its password")
	}
	if f.etcdPasswordFile != "" {
		c.EtcdUsername = f.etcdUser
		if c.EtcdPassword, err = readPasswordFile("-cluster-etcd-password-file", f.etcdPasswordFile); err != nil {
			return nil, err
		}
	}
	switch {
	case f.ca != "" || f.cert != "" || f.key != "":
		if f.ca == "" || f.cert == "" || f.key == "" {
			return nil, usageError("-cluster-ca, -cluster-cert and -cluster-key go together: members talk over mutual TLS")
		}
		client, err := tlsPair("cluster", f.ca, f.cert, f.key, false)
		if err != nil {
			return nil, err
		}
		server := client.Clone()
		server.ClientCAs, server.ClientAuth = client.RootCAs, tls.RequireAndVerifyClientCert
		c.RemoteTLS = &member.RemoteTLS{Server: server, Client: client}
	case !f.insecure:
		return nil, usageError("cluster mode needs -cluster-ca, -cluster-cert and -cluster-key (members talk over mutual TLS), or -cluster-insecure on a loopback -cluster-address to try a fleet on one machine")
	case !loopbackAddress(f.address):
		return nil, usageError("-cluster-insecure works only on a loopback -cluster-address, not %q: give -cluster-ca, -cluster-cert and -cluster-key", f.address)
	case f.advertise != "" && !loopbackAddress(f.advertise):
		return nil, usageError("-cluster-insecure works only on a loopback -cluster-advertise, not %q: give -cluster-ca, -cluster-cert and -cluster-key", f.advertise)
	}
	return c, nil
}

// checkDurations refuses, before the agent starts or joins anything, the
// cluster durations the fleet would refuse, each named by its flag: a
// negative one, a lease TTL etcd cannot grant, and a GC grace that ends
// before a node cut off from etcd has fenced its writers.
func (f *clusterFlags) checkDurations() error {
	var problems []error
	for _, d := range []struct {
		flag  string
		value time.Duration
		zero  string
	}{
		{"cluster-lease-ttl", f.leaseTTL, fmt.Sprintf("the default %v", fleet.DefaultLeaseTTL)},
		{"cluster-gc-interval", f.gcInterval, "no GC on this node"},
		{"cluster-gc-grace", f.gcGrace, fmt.Sprintf("the default %v", fleet.DefaultGCGrace)},
		{"cluster-fence-margin", f.fenceMargin, fmt.Sprintf("the default %v", agent.DefaultFenceMargin)},
		{"cluster-compact-interval", f.compactInterval, "no compaction by the fleet"},
	} {
		if d.value < 0 {
			problems = append(problems, fmt.Errorf("-%s is %v: give a positive duration, or 0 for %s", d.flag, d.value, d.zero))
		}
	}
	if f.leaseTTL > 0 && (f.leaseTTL < fleet.MinLeaseTTL || f.leaseTTL%time.Second != 0) {
		problems = append(problems, fmt.Errorf("-cluster-lease-ttl is %v: give whole seconds, at least %v (etcd grants leases in seconds), or 0 for the default %v",
			f.leaseTTL, fleet.MinLeaseTTL, fleet.DefaultLeaseTTL))
	}
	if len(problems) > 0 {
		return usageError("%w", errors.Join(problems...))
	}
	ttl := cmp.Or(f.leaseTTL, fleet.DefaultLeaseTTL)
	grace := cmp.Or(f.gcGrace, fleet.DefaultGCGrace)
	margin := cmp.Or(f.fenceMargin, agent.DefaultFenceMargin)
	if grace <= ttl+margin {
		return usageError("-cluster-gc-grace %v must be longer than -cluster-lease-ttl %v plus -cluster-fence-margin %v, so that a node cut off from etcd "+
			"has made its writers read-only before the GC frees its claims: give -cluster-gc-grace %v or more, or a shorter -cluster-lease-ttl",
			grace, ttl, margin, ttl+margin+time.Second)
	}
	return nil
}

// tlsPair is a TLS config with the certificate and key of cert and key
// (both or neither, unless they are required) and the CA of ca as roots.
func tlsPair(flag, ca, cert, key string, optionalPair bool) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if cert != "" || key != "" || !optionalPair {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("-%s-cert %q, -%s-key %q: %w", flag, cert, flag, key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("-%s-ca: %w", flag, err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, usageError("-%s-ca %s holds no PEM certificate", flag, ca)
		}
	}
	return cfg, nil
}

// readPasswordFile is the password on the first line of path (its line
// end dropped), a file that only its owner may read or write. The error
// names flag and never shows the file's content.
func readPasswordFile(flag, path string) (string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	if !info.Mode().IsRegular() {
		return "", usageError("%s %s is not a regular file", flag, path)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		return "", usageError("%s %s has mode %04o, so others may read the password; run chmod 600 %s", flag, path, perm, path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	line, rest, _ := strings.Cut(string(data), "\n")
	line = strings.TrimSuffix(line, "\r")
	switch {
	case line == "":
		return "", usageError("%s %s: the first line is empty: write the password on it", flag, path)
	case strings.TrimSpace(rest) != "":
		return "", usageError("%s %s has more than one line: write the password alone on the first", flag, path)
	}
	return line, nil
}

// loopbackAddress reports whether host:port names a loopback host.
func loopbackAddress(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	return names.LoopbackHost(host)
}
