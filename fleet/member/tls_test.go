package member_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/fleet/member"
	"github.com/plugvisor/plugvisor/internal/testpki"
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
// client use) signed by it, in a new directory for childTLSEnv.
func memberPKI(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ca := testpki.NewCA(t, "plugvisor test fleet CA")
	ca.WriteFiles(t, dir, "member", ca.Issue(t, "member", x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth))
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

	// A member whose certificate another CA signed does not join: a and b
	// refuse it, and it would hold grains nobody could reach.
	stranger := spawnChild(t, s.Endpoints(), "c", childTLSEnv+"="+memberPKI(t))
	got := stranger.next()
	require.True(t, strings.HasPrefix(got, "error "), "the stranger joined: %s", got)
	require.Contains(t, got, "the fleet's members and this one refuse each other's TLS")
	require.Contains(t, got, "-cluster-ca", "the error names the remedy")
	stranger.failed()
	require.EqualValues(t, 2, memberKeys(t, s), "the stranger left no member key in etcd")
	waitMembers(t, []*child{a, b}, a, b)
	require.Equal(t, "ok writers=alloc-1@a readers=", b.ask("get %s", onB))
}

// volumeOn finds a volume name prefix-N whose grain is on owner, as asker
// sees it, and registers it through asker.
func volumeOn(t *testing.T, asker, owner *child, prefix string) string {
	t.Helper()
	for i := range 50 {
		v := fmt.Sprintf("%s-%d", prefix, i)
		if asker.ask("owner %s", v) == owner.id {
			require.Equal(t, "ok writers= readers=", asker.ask("register %s single-node-writer", v))
			return v
		}
	}
	require.FailNow(t, "no volume's grain landed on "+owner.node)
	return ""
}
