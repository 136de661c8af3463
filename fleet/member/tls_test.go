package member_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/fleet/member"
)

// childTLS loads the remote's mTLS from dir (nil when dir is empty): the
// member serves and dials with member.pem, and trusts ca.pem alone, both
// ways.
func childTLS(dir string) (*member.RemoteTLS, error) {
	if dir == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "member.pem"), filepath.Join(dir, "member-key.pem"))
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no certificate in %s", filepath.Join(dir, "ca.pem"))
	}
	return &member.RemoteTLS{
		Server: &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool,
			ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13},
		Client: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS13},
	}, nil
}

// memberPKI makes a CA and a member certificate for loopback (server and
// client use) signed by it, in a new directory for childTLSEnv. Every run
// makes new keys.
func memberPKI(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "plugvisor test fleet CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "member"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	for name, block := range map[string]*pem.Block{
		"ca.pem": {Type: "CERTIFICATE", Bytes: caDER}, "member.pem": {Type: "CERTIFICATE", Bytes: der},
		"member-key.pem": {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600))
	}
	return dir
}

func TestMembersTalkOverMutualTLSAndRefuseAStrangersCertificate(t *testing.T) {
	s := etcdtest.Start(t)
	fleetPKI := memberPKI(t)
	a := startChild(t, s.Endpoints(), "a", childTLSEnv+"="+fleetPKI)
	b := startChild(t, s.Endpoints(), "b", childTLSEnv+"="+fleetPKI)
	waitMembers(t, []*child{a, b}, a, b)

	// A volume whose grain b hosts, claimed from a: the request crossed
	// the TLS remote.
	onB := volumeOn(t, a, b, "vol")
	require.Equal(t, "ok writers=alloc-1@a readers=", a.ask("claim %s alloc-1 write", onB))

	// A member whose certificate another CA signed is in etcd, but a and
	// b refuse its connections: its change of a volume whose grain b
	// hosts (in the topology of three, which every member computes the
	// same) gets no answer.
	stranger := startChild(t, s.Endpoints(), "c", childTLSEnv+"="+memberPKI(t))
	waitMembers(t, []*child{a, b, stranger}, a, b, stranger)
	target := volumeOn(t, a, b, "other")
	got := stranger.ask("claim %s alloc-2 write", target)
	require.True(t, strings.HasPrefix(got, "unavailable "), "the stranger reached b's grain: %s", got)
	require.Equal(t, "ok writers= readers=", a.ask("get %s", target), "the stranger changed nothing")
}

// volumeOn registers volumes named prefix-N through asker until one's
// grain is on owner, and returns its name.
func volumeOn(t *testing.T, asker, owner *child, prefix string) string {
	t.Helper()
	for i := range 50 {
		v := fmt.Sprintf("%s-%d", prefix, i)
		require.Equal(t, "ok writers= readers=", asker.ask("register %s single-node-writer", v))
		if asker.ask("owner %s", v) == owner.id {
			return v
		}
	}
	require.FailNow(t, "no volume's grain landed on "+owner.node)
	return ""
}
