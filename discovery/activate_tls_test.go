package discovery

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/sdk"
	"github.com/stretchr/testify/require"
)

func TestActivateOverTLS(t *testing.T) {
	pki := newTestPKI(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serveOn(t, tls.NewListener(l, pki.serverConfig), sdk.NewHandler(manifestJSON("authz")))
	addr := l.Addr().String()

	tests := []struct {
		name    string
		spec    string
		wantErr error
		errText string
	}{
		{
			name: "trusting the CA and showing a client certificate",
			spec: `{"Addr": "https://` + addr + `", "TLSConfig": {"CAFile": "` + pki.ca + `", "CertFile": "` + pki.cert + `", "KeyFile": "` + pki.key + `"}}`,
		},
		{
			name: "skipping verification, with a client certificate",
			spec: `{"Addr": "https://` + addr + `", "TLSConfig": {"InsecureSkipVerify": true, "CertFile": "` + pki.cert + `", "KeyFile": "` + pki.key + `"}}`,
		},
		{
			name: "without a CA, verification is skipped, as Docker does",
			spec: `{"Addr": "https://` + addr + `", "TLSConfig": {"CertFile": "` + pki.cert + `", "KeyFile": "` + pki.key + `"}}`,
		},
		{
			name:    "without a TLSConfig an https address is verified against the system roots",
			spec:    `{"Addr": "https://` + addr + `"}`,
			wantErr: ErrUnreachable,
			errText: "certificate",
		},
		{
			name:    "a tcp address with TLS settings is plain HTTP, as Docker speaks it",
			spec:    `{"Addr": "tcp://` + addr + `", "TLSConfig": {"CAFile": "` + pki.ca + `", "CertFile": "` + pki.cert + `", "KeyFile": "` + pki.key + `"}}`,
			wantErr: ErrPluginFailed,
			errText: "HTTPS server",
		},
		{
			name:    "without a client certificate the server refuses",
			spec:    `{"Addr": "https://` + addr + `", "TLSConfig": {"CAFile": "` + pki.ca + `"}}`,
			wantErr: ErrUnreachable,
			errText: "certificate",
		},
		{
			name:    "a missing CA file is unusable TLS settings",
			spec:    `{"Addr": "https://` + addr + `", "TLSConfig": {"CAFile": "/nonexistent/ca.pem"}}`,
			wantErr: ErrTLSConfig,
			errText: "read CA file",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := tempDir(t)
			writeFile(t, filepath.Join(dir, "secure.json"), tt.spec)
			c, err := Lookup(Dirs{Specs: []string{dir}}, "secure")
			require.NoError(t, err)
			m, err := Activate(context.Background(), c, ActivateOptions{Timeout: 5 * time.Second})
			if tt.wantErr == nil {
				require.NoError(t, err)
				require.Equal(t, []string{TypeDockerAuthz}, TypesFor(m))
				return
			}
			requireCallError(t, err, tt.wantErr, "Plugin.Activate")
			require.ErrorContains(t, err, tt.errText)
		})
	}
}

// testPKI is a CA, a server certificate for 127.0.0.1 and a client
// certificate, written to files.
type testPKI struct {
	ca, cert, key string
	serverConfig  *tls.Config
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "plugvisor test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	issue := func(serial int64, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "plugvisor test"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		require.NoError(t, err)
		keyDER, err := x509.MarshalECPrivateKey(key)
		require.NoError(t, err)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	}
	srvCert, srvKey := issue(2, x509.ExtKeyUsageServerAuth)
	cliCert, cliKey := issue(3, x509.ExtKeyUsageClientAuth)
	pki := testPKI{ca: filepath.Join(dir, "ca.pem"), cert: filepath.Join(dir, "client.pem"), key: filepath.Join(dir, "client-key.pem")}
	writeFile(t, pki.ca, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})))
	writeFile(t, pki.cert, string(cliCert))
	writeFile(t, pki.key, string(cliKey))
	pair, err := tls.X509KeyPair(srvCert, srvKey)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	pki.serverConfig = &tls.Config{
		Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool,
		MinVersion: tls.VersionTLS12,
	}
	return pki
}
