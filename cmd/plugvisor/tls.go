package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	cmdline "github.com/plugvisor/plugvisor/internal/cli"
	"github.com/plugvisor/plugvisor/internal/pki"
)

const tlsLong = `Makes the certificate authority of a fleet and its certificates, as
"nomad tls" and "consul tls" do: one CA, then a certificate for etcd, one
per agent and one for the CLI, each signed by the CA. Every member of the
fleet trusts that CA alone: etcd serves only clients with a certificate it
signed, and the agents' member ports only each other.

Keys are ECDSA P-256. Files are written into -dir and never overwritten:
certificates mode 0644, keys 0600. Keep ca-key.pem off the fleet's hosts:
whoever holds it can make certificates the fleet trusts.`

const tlsExample = `  plugvisor tls ca create -dir /etc/plugvisor/tls
  plugvisor tls cert create -dir /etc/plugvisor/tls -etcd -dns etcd.example.com -ip 10.0.0.2
  plugvisor tls cert create -dir /etc/plugvisor/tls -agent n1 -ip 10.0.0.5
  plugvisor tls cert create -dir /etc/plugvisor/tls -cli`

func newTLSCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "tls",
		Short:   "make a fleet's CA and its certificates for etcd, agents and the CLI",
		Long:    tlsLong,
		Example: tlsExample,
	}
	ca := &cobra.Command{
		Use:     "ca",
		Short:   "make the fleet's certificate authority",
		Example: "  plugvisor tls ca create -dir /etc/plugvisor/tls",
	}
	ca.AddCommand(newTLSCACreateCmd())
	cert := &cobra.Command{
		Use:     "cert",
		Short:   "make a certificate for etcd, an agent or the CLI, signed by the fleet's CA",
		Example: "  plugvisor tls cert create -etcd\n  plugvisor tls cert create -agent n1",
	}
	cert.AddCommand(newTLSCertCreateCmd())
	cmd.AddCommand(ca, cert)
	return cmd
}

func newTLSCACreateCmd() *cobra.Command {
	var dir string
	var days int
	cmd := &cobra.Command{
		Use:   "create",
		Short: "make a CA: DIR/ca.pem and DIR/ca-key.pem",
		Long: `Makes a new certificate authority, valid for -days, and writes its
certificate to DIR/ca.pem (mode 0644: give it to every host of the fleet)
and its key to DIR/ca-key.pem (mode 0600: keep it off the fleet's hosts).
An existing file is never overwritten.`,
		Example: "  plugvisor tls ca create\n  plugvisor tls ca create -dir /etc/plugvisor/tls -days 3650",
		Args:    cmdline.Args("", "plugvisor tls ca create -dir /etc/plugvisor/tls"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			lifetime, err := daysFlag(days)
			if err != nil {
				return err
			}
			ca, err := pki.NewAuthority(lifetime, time.Now())
			if err != nil {
				return err
			}
			certPath, keyPath, err := pki.Write(dir, "ca", ca.Pair())
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "wrote %s: the CA %q, valid until %s\n", certPath, ca.Cert.Subject.CommonName, ca.Cert.NotAfter.Format(time.DateOnly))
			fmt.Fprintf(w, "wrote %s: its key (mode 0600): keep it off the fleet's hosts, as it signs every certificate\n", keyPath)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&dir, "dir", ".", "the directory to write into (made, mode 0700, when missing)")
	fs.IntVar(&days, "days", int(pki.DefaultCALifetime/(24*time.Hour)), "how many days the CA is valid")
	return cmd
}

func newTLSCertCreateCmd() *cobra.Command {
	var dir, caFile, caKeyFile, node string
	var etcd, cli bool
	var days int
	var dnsNames, ips stringList
	cmd := &cobra.Command{
		Use:   "create",
		Short: "make a certificate signed by the CA: for etcd (-etcd), an agent (-agent NODE) or the CLI (-cli)",
		Long: `Makes a certificate and its key, signed by the CA of -ca and -ca-key, for
one of:

  -etcd        etcd's client and peer ports: DIR/etcd.pem, DIR/etcd-key.pem
               (server and client use)
  -agent NODE  the agent with -node-id NODE: DIR/agent-NODE.pem and its key
               (server use on its member port, client use towards the other
               members and etcd; its name is NODE)
  -cli         an operator's commands that reach etcd: DIR/cli.pem and its
               key (client use only)

Server certificates are valid for localhost, 127.0.0.1 and ::1, and for
every -dns and -ip given: name each host and address the others dial.
An existing file is never overwritten.`,
		Example: `  plugvisor tls cert create -etcd -dns etcd.example.com -ip 10.0.0.2
  plugvisor tls cert create -agent n1 -ip 10.0.0.5
  plugvisor tls cert create -cli -days 30
  plugvisor tls cert create -dir /etc/plugvisor/tls -ca /etc/plugvisor/tls/ca.pem -ca-key /secure/ca-key.pem -agent n2`,
		Args: cmdline.Args("", "plugvisor tls cert create -agent n1"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := certRequest(etcd, node, cli, dnsNames, ips)
			if err != nil {
				return err
			}
			if req.Lifetime, err = daysFlag(days); err != nil {
				return err
			}
			caFile, caKeyFile = defaultIn(dir, caFile, "ca.pem"), defaultIn(dir, caKeyFile, "ca-key.pem")
			ca, err := pki.LoadAuthority(caFile, caKeyFile)
			if err != nil {
				return fmt.Errorf("-ca %s, -ca-key %s: %w", caFile, caKeyFile, err)
			}
			now := time.Now()
			if end := now.Add(req.Lifetime); end.After(ca.Cert.NotAfter) {
				return usageError("-days %d: the certificate would outlive its CA, which expires on %s: give -days %d or fewer, or make a new CA",
					days, ca.Cert.NotAfter.Format(time.DateOnly), max(0, int(ca.Cert.NotAfter.Sub(now)/(24*time.Hour))))
			}
			pair, err := ca.Issue(req, now)
			if errors.Is(err, pki.ErrInvalid) {
				return usageError("%w", err)
			}
			if err != nil {
				return err
			}
			certPath, keyPath, err := pki.Write(dir, req.Name(), pair)
			if err != nil {
				return err
			}
			printCert(cmd.OutOrStdout(), req, pair, certPath, keyPath)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&etcd, "etcd", false, "a certificate for etcd's client and peer ports")
	fs.StringVar(&node, "agent", "", "a certificate for the agent with this -node-id")
	fs.BoolVar(&cli, "cli", false, "a client certificate for the CLI's commands that reach etcd")
	fs.StringVar(&dir, "dir", ".", "the directory to write into, and where -ca and -ca-key are by default")
	fs.StringVar(&caFile, "ca", "", "the CA's certificate (default DIR/ca.pem)")
	fs.StringVar(&caKeyFile, "ca-key", "", "the CA's key (default DIR/ca-key.pem)")
	fs.IntVar(&days, "days", int(pki.DefaultCertLifetime/(24*time.Hour)), "how many days the certificate is valid")
	fs.Var(&dnsNames, "dns", "a DNS name clients dial the server at, besides localhost (repeatable; not with -cli)")
	fs.Var(&ips, "ip", "an IP address clients dial the server at, besides 127.0.0.1 and ::1 (repeatable; not with -cli)")
	return cmd
}

// certRequest is the request the role flags ask for; exactly one role.
func certRequest(etcd bool, node string, cli bool, dnsNames, ips []string) (pki.Request, error) {
	var roles []pki.Role
	if etcd {
		roles = append(roles, pki.Etcd)
	}
	if node != "" {
		roles = append(roles, pki.Agent)
	}
	if cli {
		roles = append(roles, pki.CLI)
	}
	if len(roles) != 1 {
		return pki.Request{}, usageError("give one of -etcd, -agent NODE or -cli: the certificate is for one of them")
	}
	req := pki.Request{Role: roles[0], Node: node, DNSNames: dnsNames}
	if req.Role == pki.CLI && (len(dnsNames) > 0 || len(ips) > 0) {
		return pki.Request{}, usageError("-cli makes a client's certificate, which names no host: leave out -dns and -ip")
	}
	for _, s := range ips {
		ip := net.ParseIP(s)
		if ip == nil {
			return pki.Request{}, usageError("-ip %q is not an IP address: give one such as 10.0.0.5 or fd00::5 (host names go in -dns)", s)
		}
		req.IPs = append(req.IPs, ip)
	}
	return req, nil
}

// daysFlag is a -days flag's lifetime; it must be positive.
func daysFlag(days int) (time.Duration, error) {
	if days <= 0 {
		return 0, usageError("-days %d: give a number of days, 1 or more", days)
	}
	return time.Duration(days) * 24 * time.Hour, nil
}

// defaultIn is file, or name in dir when file is empty.
func defaultIn(dir, file, name string) string {
	if file != "" {
		return file
	}
	return filepath.Join(dir, name)
}

// printCert says which files cert create wrote, and what the certificate is for.
func printCert(w io.Writer, req pki.Request, p *pki.Pair, certPath, keyPath string) {
	use := "server and client use"
	if req.Role == pki.CLI {
		use = "client use"
	}
	names := append([]string{}, p.Cert.DNSNames...)
	for _, ip := range p.Cert.IPAddresses {
		names = append(names, ip.String())
	}
	what := map[pki.Role]string{pki.Etcd: "etcd's", pki.Agent: "agent " + req.Node + "'s", pki.CLI: "the CLI's"}[req.Role] + " certificate (" + use
	if len(names) > 0 {
		what += "; " + strings.Join(names, ", ")
	}
	fmt.Fprintf(w, "wrote %s: %s), valid until %s\n", certPath, what, p.Cert.NotAfter.Format(time.DateOnly))
	fmt.Fprintf(w, "wrote %s: its key (mode 0600)\n", keyPath)
}
