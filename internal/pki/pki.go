// Package pki makes the certificate authority and the certificates of a
// fleet, as `nomad tls` and `consul tls` do: a CA, then a certificate for
// etcd (its client and peer ports), one for each agent (its member port,
// and its client of etcd), and one for the CLI (a client of etcd). Keys
// are ECDSA P-256; files are written once, keys 0600 and certificates
// 0644. `plugvisor tls` and fleet/etcdtest's TLS member use it.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/names"
)

// Lifetimes.
const (
	// DefaultCALifetime is a CA's lifetime: five years, as nomad tls ca create.
	DefaultCALifetime = 5 * 365 * 24 * time.Hour
	// DefaultCertLifetime is a certificate's lifetime: one year.
	DefaultCertLifetime = 365 * 24 * time.Hour
	// backdate is how long before now a certificate is valid from, so that
	// a host whose clock is a little behind accepts it.
	backdate = time.Minute
)

// ErrExists is returned when a file to write exists already: nothing is
// overwritten.
var ErrExists = errclass.New(errclass.Conflict, "file exists")

// ErrInvalid is returned for a request that cannot make a certificate: a
// bad name, lifetime or address, or a CA whose key does not match it.
var ErrInvalid = errclass.New(errclass.Invalid, "invalid certificate request")

// Role is what a certificate is for; it decides its usages, its subject
// and its names.
type Role int

// The roles.
const (
	// Etcd is an etcd member's certificate: server use on its client and
	// peer ports, client use towards its peers (and its own gRPC gateway).
	Etcd Role = iota + 1
	// Agent is an agent's certificate, named by its node ID: server use on
	// its member port, client use towards the other members and etcd.
	Agent
	// CLI is an operator's certificate: client use towards etcd.
	CLI
)

func (r Role) String() string {
	switch r {
	case Etcd:
		return "etcd"
	case Agent:
		return "agent"
	case CLI:
		return "cli"
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// Authority is a CA: it signs certificates.
type Authority struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// NewAuthority makes a CA valid from now for lifetime, with a random name
// ("plugvisor CA 3f9c…") so that two fleets' CAs are told apart.
func NewAuthority(lifetime time.Duration, now time.Time) (*Authority, error) {
	if lifetime <= 0 {
		return nil, fmt.Errorf("%w: a CA's lifetime is %v: give a positive one", ErrInvalid, lifetime)
	}
	key, serial, err := newKeyAndSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "plugvisor CA " + hex.EncodeToString(serial.Bytes()[12:]), Organization: []string{"plugvisor"}},
		NotBefore:    now.Add(-backdate), NotAfter: now.Add(lifetime),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("make a CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Authority{Cert: cert, Key: key}, nil
}

// LoadAuthority reads a CA from its certificate and key files, as
// NewAuthority made and Write wrote them.
func LoadAuthority(certFile, keyFile string) (*Authority, error) {
	cert, err := readCert(certFile)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("%w: %s is not a CA certificate: give the CA's (plugvisor tls ca create makes one)", ErrInvalid, certFile)
	}
	key, err := readKey(keyFile)
	if err != nil {
		return nil, err
	}
	if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return nil, fmt.Errorf("%w: the key %s is not the key of the CA %s: give the pair that plugvisor tls ca create wrote", ErrInvalid, keyFile, certFile)
	}
	return &Authority{Cert: cert, Key: key}, nil
}

// Request says which certificate to issue.
type Request struct {
	Role Role
	// Node is the agent's node ID (Role Agent only): its subject's common
	// name, and its file's name.
	Node string
	// DNSNames and IPs are names the certificate is valid for besides
	// localhost, 127.0.0.1 and ::1 (Etcd and Agent only: the hosts clients
	// dial it at).
	DNSNames []string
	IPs      []net.IP
	// Lifetime is how long it is valid from now (default
	// DefaultCertLifetime); it must end before the CA does.
	Lifetime time.Duration
}

// Name is the certificate's file name without ".pem": etcd, agent-<node>
// or cli.
func (r Request) Name() string {
	if r.Role == Agent {
		return "agent-" + r.Node
	}
	return r.Role.String()
}

// check refuses a request that cannot make a certificate of ca's.
func (r Request) check(ca *Authority, now time.Time) error {
	var problems []string
	switch r.Role {
	case Etcd, CLI:
		if r.Node != "" {
			problems = append(problems, fmt.Sprintf("a node ID (%q) names an agent's certificate only", r.Node))
		}
	case Agent:
		if err := names.Check("node ID", r.Node); err != nil {
			problems = append(problems, err.Error())
		}
	default:
		problems = append(problems, fmt.Sprintf("unknown role %v: give Etcd, Agent or CLI", r.Role))
	}
	if r.Role == CLI && (len(r.DNSNames) > 0 || len(r.IPs) > 0) {
		problems = append(problems, "a CLI certificate is a client's: it names no host (no DNS names or IPs)")
	}
	for _, d := range r.DNSNames {
		if !validDNSName(d) {
			problems = append(problems, fmt.Sprintf("DNS name %q: give a host name such as etcd.example.com or *.example.com", d))
		}
	}
	for _, ip := range r.IPs {
		if ip == nil || (ip.To4() == nil && len(ip) != net.IPv6len) {
			problems = append(problems, fmt.Sprintf("IP %v is not an IP address", ip))
		}
	}
	lifetime := r.lifetime()
	switch {
	case lifetime <= 0:
		problems = append(problems, fmt.Sprintf("lifetime %v: give a positive one", lifetime))
	case now.Add(lifetime).After(ca.Cert.NotAfter):
		left := ca.Cert.NotAfter.Sub(now)
		problems = append(problems, fmt.Sprintf("a lifetime of %d days ends after the CA's, on %s (%d days from now): give a shorter one, or a new CA",
			days(lifetime), ca.Cert.NotAfter.Format(time.DateOnly), max(0, days(left))))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalid, strings.Join(problems, "; "))
	}
	return nil
}

func (r Request) lifetime() time.Duration {
	if r.Lifetime == 0 {
		return DefaultCertLifetime
	}
	return r.Lifetime
}

// days is d in whole days, rounded down.
func days(d time.Duration) int { return int(d / (24 * time.Hour)) }

// Issue signs the certificate r asks for, valid from now.
func (ca *Authority) Issue(r Request, now time.Time) (*Pair, error) {
	if err := r.check(ca, now); err != nil {
		return nil, err
	}
	key, serial, err := newKeyAndSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: r.commonName(), Organization: []string{"plugvisor"}},
		NotBefore:    now.Add(-backdate), NotAfter: now.Add(r.lifetime()),
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if r.Role == CLI {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	} else {
		tmpl.DNSNames = append([]string{"localhost"}, r.DNSNames...)
		tmpl.IPAddresses = append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, r.IPs...)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("issue the %s certificate: %w", r.Name(), err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Pair{Cert: cert, Key: key}, nil
}

// commonName is the subject's name: the node ID of an agent, else the role.
func (r Request) commonName() string {
	if r.Role == Agent {
		return r.Node
	}
	return r.Role.String()
}

// Pair is a certificate and its key.
type Pair struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// Pair is the CA's own certificate and key, to write them.
func (ca *Authority) Pair() *Pair { return &Pair{Cert: ca.Cert, Key: ca.Key} }

// Write writes p into dir as <name>.pem (the certificate, mode 0644) and
// <name>-key.pem (its key, PKCS #8, mode 0600), and returns their paths.
// It refuses (ErrExists) when either file exists, and writes neither then;
// dir is made (mode 0700) when missing.
func Write(dir, name string, p *Pair) (certPath, keyPath string, err error) {
	certPath, keyPath = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	for _, path := range []string{certPath, keyPath} {
		if _, err := os.Lstat(path); err == nil {
			return "", "", fmt.Errorf("%s: %w: nothing was written; move it aside, or give another -dir", path, ErrExists)
		}
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(p.Key)
	if err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	if err := writeNew(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return "", "", err
	}
	if err := writeNew(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.Cert.Raw}), 0o644); err != nil {
		_ = os.Remove(keyPath)
		return "", "", err
	}
	return certPath, keyPath, nil
}

// writeNew writes data into path, which must not exist, with exactly mode
// perm whatever the umask, and syncs it.
func writeNew(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%s: %w: move it aside, or give another -dir", path, ErrExists)
	}
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	err = errors.Join(err, f.Chmod(perm), f.Sync(), f.Close())
	if err != nil {
		_ = os.Remove(path)
	}
	return err
}

func newKeyAndSerial() (*ecdsa.PrivateKey, *big.Int, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	// 128 random bits, positive, as RFC 5280 and the CA/Browser Forum ask.
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, nil, err
	}
	return key, serial.SetBit(serial, 127, 1), nil
}

func readCert(path string) (*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%w: %s holds no PEM certificate", ErrInvalid, path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, path, err)
	}
	return cert, nil
}

func readKey(path string) (*ecdsa.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("%w: %s holds no PEM key", ErrInvalid, path)
	}
	var key any
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		err = fmt.Errorf("a PEM block of type %q", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v: give an ECDSA key in PEM", ErrInvalid, path, err)
	}
	ec, ok := key.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: %s is not an ECDSA key", ErrInvalid, path)
	}
	return ec, nil
}

// validDNSName reports whether name is a host name a certificate can
// carry: labels of letters, digits and hyphens, a leading "*." allowed.
func validDNSName(name string) bool {
	name = strings.TrimPrefix(name, "*.")
	if name == "" || len(name) > 253 || net.ParseIP(name) != nil {
		return false
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		if strings.ContainsFunc(label, func(r rune) bool { return r != '-' && !isAlnum(r) }) {
			return false
		}
	}
	return true
}

func isAlnum(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}
