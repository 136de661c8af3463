package agent_test

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"testing"

	"github.com/plugvisor/plugvisor/internal/testpki"
)

// pki is a certificate authority made for one test, with the agent's
// certificate and key written to files. Nothing is committed: every run
// makes new keys.
type pki struct {
	ca                        *testpki.CA
	caFile, certFile, keyFile string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	dir := t.TempDir()
	p := &pki{ca: testpki.NewCA(t, "plugvisor test CA"),
		caFile: dir + "/ca.pem", certFile: dir + "/agent.pem", keyFile: dir + "/agent-key.pem"}
	p.ca.WriteFiles(t, dir, "agent", p.issue(t, "agent", x509.ExtKeyUsageServerAuth))
	return p
}

// issue signs a certificate for loopback with the CA.
func (p *pki) issue(t *testing.T, name string, usage x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	return p.ca.Issue(t, name, usage)
}

// client is an HTTPS client that trusts the CA and presents certs.
func (p *pki) client(t *testing.T, certs ...tls.Certificate) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(p.ca.Cert)
	return httpClient(t, &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: certs, MinVersion: tls.VersionTLS12}})
}
