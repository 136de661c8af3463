package pki_test

import (
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/internal/pki"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func newCA(t *testing.T) *pki.Authority {
	t.Helper()
	ca, err := pki.NewAuthority(pki.DefaultCALifetime, now)
	require.NoError(t, err)
	return ca
}

func issue(t *testing.T, ca *pki.Authority, r pki.Request) *x509.Certificate {
	t.Helper()
	p, err := ca.Issue(r, now)
	require.NoError(t, err)
	return p.Cert
}

// verify checks cert against ca alone, for usage, naming host when given,
// at the time at.
func verify(cert *x509.Certificate, ca *pki.Authority, usage x509.ExtKeyUsage, host string, at time.Time) error {
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	_, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}, DNSName: host, CurrentTime: at})
	return err
}

func TestACAIsSelfSignedSignsOnlyLeavesAndLastsFiveYears(t *testing.T) {
	ca := newCA(t)
	require.True(t, ca.Cert.IsCA)
	require.True(t, ca.Cert.MaxPathLenZero, "the CA signs leaves only")
	require.NotZero(t, ca.Cert.KeyUsage&x509.KeyUsageCertSign)
	require.Regexp(t, `^plugvisor CA [0-9a-f]{8}$`, ca.Cert.Subject.CommonName)
	require.NoError(t, ca.Cert.CheckSignatureFrom(ca.Cert))
	require.Equal(t, now.Add(pki.DefaultCALifetime), ca.Cert.NotAfter)
	require.Equal(t, x509.ECDSA, ca.Cert.PublicKeyAlgorithm)
	require.NotEqual(t, ca.Cert.Subject.CommonName, newCA(t).Cert.Subject.CommonName, "two CAs are told apart")
	_, err := pki.NewAuthority(0, now)
	require.ErrorIs(t, err, errclass.Invalid)
}

func TestEachRolesCertificateVerifiesForItsUsesAndNamesOnly(t *testing.T) {
	ca := newCA(t)
	etcd := issue(t, ca, pki.Request{Role: pki.Etcd, DNSNames: []string{"etcd.example.com"}, IPs: []net.IP{net.ParseIP("10.0.0.2")}})
	agent := issue(t, ca, pki.Request{Role: pki.Agent, Node: "n1", IPs: []net.IP{net.ParseIP("10.0.0.5")}})
	cli := issue(t, ca, pki.Request{Role: pki.CLI})
	at := now.Add(time.Hour)

	for _, c := range []struct {
		name string
		cert *x509.Certificate
	}{{"etcd", etcd}, {"agent", agent}} {
		t.Run(c.name+" serves and dials", func(t *testing.T) {
			for _, host := range []string{"localhost", "127.0.0.1", "::1"} {
				require.NoError(t, verify(c.cert, ca, x509.ExtKeyUsageServerAuth, host, at), host)
			}
			require.NoError(t, verify(c.cert, ca, x509.ExtKeyUsageClientAuth, "", at))
			require.Error(t, verify(c.cert, ca, x509.ExtKeyUsageServerAuth, "other.example.com", at), "a name not given")
			require.Equal(t, x509.ECDSA, c.cert.PublicKeyAlgorithm)
			require.False(t, c.cert.IsCA)
		})
	}
	require.NoError(t, verify(etcd, ca, x509.ExtKeyUsageServerAuth, "etcd.example.com", at))
	require.NoError(t, verify(etcd, ca, x509.ExtKeyUsageServerAuth, "10.0.0.2", at))
	require.Error(t, verify(etcd, ca, x509.ExtKeyUsageServerAuth, "10.0.0.5", at))
	require.NoError(t, verify(agent, ca, x509.ExtKeyUsageServerAuth, "10.0.0.5", at))
	require.Equal(t, "n1", agent.Subject.CommonName, "an agent's certificate names its node")
	require.Equal(t, "etcd", etcd.Subject.CommonName)

	t.Run("cli dials only", func(t *testing.T) {
		require.NoError(t, verify(cli, ca, x509.ExtKeyUsageClientAuth, "", at))
		var usage x509.CertificateInvalidError
		require.ErrorAs(t, verify(cli, ca, x509.ExtKeyUsageServerAuth, "", at), &usage)
		require.Equal(t, x509.IncompatibleUsage, usage.Reason)
		require.Empty(t, cli.DNSNames)
		require.Empty(t, cli.IPAddresses)
	})

	t.Run("another CA's roots refuse them", func(t *testing.T) {
		var unknown x509.UnknownAuthorityError
		require.ErrorAs(t, verify(agent, newCA(t), x509.ExtKeyUsageClientAuth, "", at), &unknown)
	})
}

func TestACertificateExpiresAfterItsLifetimeAndNeverAfterItsCA(t *testing.T) {
	ca := newCA(t)
	cert := issue(t, ca, pki.Request{Role: pki.CLI})
	require.Equal(t, now.Add(pki.DefaultCertLifetime), cert.NotAfter, "a year by default")
	require.NoError(t, verify(cert, ca, x509.ExtKeyUsageClientAuth, "", now.Add(-30*time.Second)), "valid a little before now: clocks skew")
	require.NoError(t, verify(cert, ca, x509.ExtKeyUsageClientAuth, "", now.Add(pki.DefaultCertLifetime-time.Second)))
	var expired x509.CertificateInvalidError
	require.ErrorAs(t, verify(cert, ca, x509.ExtKeyUsageClientAuth, "", now.Add(pki.DefaultCertLifetime+time.Second)), &expired)
	require.Equal(t, x509.Expired, expired.Reason)

	short := issue(t, ca, pki.Request{Role: pki.Agent, Node: "n2", Lifetime: 24 * time.Hour})
	require.Equal(t, now.Add(24*time.Hour), short.NotAfter)

	_, err := ca.Issue(pki.Request{Role: pki.Etcd, Lifetime: pki.DefaultCALifetime + 24*time.Hour}, now)
	require.ErrorIs(t, err, pki.ErrInvalid)
	require.ErrorContains(t, err, "ends after the CA's, on 2031-11-28 (1825 days from now): give a shorter one, or a new CA")
}

func TestABadRequestIsRefusedNamingWhatIsWrong(t *testing.T) {
	ca := newCA(t)
	for _, c := range []struct {
		name string
		r    pki.Request
		want string
	}{
		{"an agent without a node", pki.Request{Role: pki.Agent}, "node ID"},
		{"an agent whose node ID has a separator", pki.Request{Role: pki.Agent, Node: "a/b"}, "node ID"},
		{"a node ID on etcd's certificate", pki.Request{Role: pki.Etcd, Node: "n1"}, "names an agent's certificate only"},
		{"a host on the CLI's", pki.Request{Role: pki.CLI, DNSNames: []string{"x.example.com"}}, "a CLI certificate is a client's"},
		{"a DNS name with a space", pki.Request{Role: pki.Etcd, DNSNames: []string{"etcd example"}}, `DNS name "etcd example"`},
		{"an IP as a DNS name", pki.Request{Role: pki.Etcd, DNSNames: []string{"10.0.0.2"}}, `DNS name "10.0.0.2"`},
		{"a negative lifetime", pki.Request{Role: pki.CLI, Lifetime: -time.Hour}, "give a positive one"},
		{"no role", pki.Request{}, "unknown role"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ca.Issue(c.r, now)
			require.ErrorIs(t, err, pki.ErrInvalid)
			require.ErrorContains(t, err, c.want)
		})
	}
	p, err := ca.Issue(pki.Request{Role: pki.Etcd, DNSNames: []string{"*.etcd.example.com", "etcd-1"}}, now)
	require.NoError(t, err, "a wildcard and a short name are host names")
	require.Contains(t, p.Cert.DNSNames, "*.etcd.example.com")
}

func TestFilesAreWrittenOnceWithTheirModesAndLoadBack(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	ca := newCA(t)
	certPath, keyPath, err := pki.Write(dir, "ca", ca.Pair())
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, "ca.pem"), certPath)
	require.Equal(t, filepath.Join(dir, "ca-key.pem"), keyPath)
	for path, mode := range map[string]os.FileMode{dir: 0o700 | os.ModeDir, certPath: 0o644, keyPath: 0o600} {
		info, err := os.Stat(path)
		require.NoError(t, err)
		require.Equal(t, mode, info.Mode(), path)
	}

	loaded, err := pki.LoadAuthority(certPath, keyPath)
	require.NoError(t, err)
	require.True(t, loaded.Cert.Equal(ca.Cert))
	require.True(t, loaded.Key.Equal(ca.Key))

	before, err := os.ReadFile(keyPath)
	require.NoError(t, err)
	_, _, err = pki.Write(dir, "ca", newCA(t).Pair())
	require.ErrorIs(t, err, pki.ErrExists)
	require.ErrorIs(t, err, errclass.Conflict)
	after, err := os.ReadFile(keyPath)
	require.NoError(t, err)
	require.Equal(t, before, after, "the CA's key is never overwritten")

	require.NoError(t, os.Remove(certPath))
	_, _, err = pki.Write(dir, "ca", newCA(t).Pair())
	require.ErrorIs(t, err, pki.ErrExists, "either file existing refuses both")
	require.NoFileExists(t, certPath)
}

func TestACAThatIsNotOneOrWhoseKeyDiffersIsRefused(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t)
	_, _, err := pki.Write(dir, "ca", ca.Pair())
	require.NoError(t, err)
	_, _, err = pki.Write(dir, "other", newCA(t).Pair())
	require.NoError(t, err)
	leaf, err := ca.Issue(pki.Request{Role: pki.CLI}, now)
	require.NoError(t, err)
	_, _, err = pki.Write(dir, "cli", leaf)
	require.NoError(t, err)

	_, err = pki.LoadAuthority(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "other-key.pem"))
	require.ErrorContains(t, err, "is not the key of the CA")
	_, err = pki.LoadAuthority(filepath.Join(dir, "cli.pem"), filepath.Join(dir, "cli-key.pem"))
	require.ErrorContains(t, err, "is not a CA certificate")
	_, err = pki.LoadAuthority(filepath.Join(dir, "ca-key.pem"), filepath.Join(dir, "ca-key.pem"))
	require.ErrorContains(t, err, "holds no PEM certificate")
	_, err = pki.LoadAuthority(filepath.Join(dir, "missing.pem"), filepath.Join(dir, "ca-key.pem"))
	require.ErrorIs(t, err, os.ErrNotExist)
}
