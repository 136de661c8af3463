package embedded_test

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/plugvisor/plugvisor/fleet/embedded"
	"github.com/plugvisor/plugvisor/internal/pki"
)

func TestAMemberOffLoopbackIsRefusedBeforeItStarts(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ name, client, peer string }{
		{"a client URL on every interface", "http://0.0.0.0:2379", "http://127.0.0.1:2380"},
		{"a peer URL on another host", "http://127.0.0.1:2379", "http://10.1.2.3:2380"},
	} {
		t.Run(c.name, func(t *testing.T) {
			client, err := url.Parse(c.client)
			require.NoError(t, err)
			peer, err := url.Parse(c.peer)
			require.NoError(t, err)
			_, err = embedded.Start(embedded.Config{Dir: dir, Client: client, Peer: peer})
			require.ErrorIs(t, err, embedded.ErrNotLoopback)
			require.ErrorContains(t, err, "http://127.0.0.1:PORT")
		})
	}
	require.NoDirExists(t, dir+"/member", "nothing was written")
}

// TestAMemberCompactsItsHistoryByItself starts a member that keeps 1 s of
// history, writes to it, and waits until a read at the first revisions
// fails because the member compacted them.
func TestAMemberCompactsItsHistoryByItself(t *testing.T) {
	client, peer := freeURL(t), freeURL(t)
	e, err := embedded.Start(embedded.Config{Dir: t.TempDir(), Client: client, Peer: peer, CompactionRetention: time.Second})
	require.NoError(t, err)
	t.Cleanup(e.Close)
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{client.String()}, DialTimeout: 30 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var first int64
	for i := range 20 {
		resp, err := c.Put(ctx, "key", fmt.Sprint(i))
		require.NoError(t, err)
		first = cmp.Or(first, resp.Header.Revision)
	}
	require.Eventually(t, func() bool {
		_, err := c.Put(ctx, "key", "more") // the periodic compactor compacts a revision it saw
		require.NoError(t, err)
		_, err = c.Get(ctx, "key", clientv3.WithRev(first))
		return errors.Is(err, rpctypes.ErrCompacted)
	}, 30*time.Second, 100*time.Millisecond, "the member compacts revisions older than its retention")
}

// freeURL is an http URL on a loopback port free a moment ago.
func freeURL(t *testing.T) *url.URL {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, l.Close())
	return &url.URL{Scheme: "http", Host: l.Addr().String()}
}

// pkiFiles writes a CA, an etcd certificate and a CLI certificate into a
// new directory, as plugvisor tls does, and returns it.
func pkiFiles(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.NewAuthority(time.Hour, time.Now())
	require.NoError(t, err)
	_, _, err = pki.Write(dir, "ca", ca.Pair())
	require.NoError(t, err)
	for _, r := range []pki.Request{{Role: pki.Etcd, Lifetime: time.Minute}, {Role: pki.CLI, Lifetime: time.Minute}} {
		p, err := ca.Issue(r, time.Now())
		require.NoError(t, err)
		_, _, err = pki.Write(dir, r.Name(), p)
		require.NoError(t, err)
	}
	return dir
}

// clientTLS trusts dir's CA and presents the certificate name of certDir
// (none when name is empty).
func clientTLS(t *testing.T, dir, certDir, name string) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	require.NoError(t, err)
	cfg := &tls.Config{RootCAs: x509.NewCertPool(), MinVersion: tls.VersionTLS12}
	require.True(t, cfg.RootCAs.AppendCertsFromPEM(pem))
	if name != "" {
		pair, err := tls.LoadX509KeyPair(filepath.Join(certDir, name+".pem"), filepath.Join(certDir, name+"-key.pem"))
		require.NoError(t, err)
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// TestAMemberWithTLSServesOnlyClientsWithACertificateOfItsCA: a client
// with the CLI's certificate writes and reads; one without a certificate,
// one whose certificate another CA signed, and one in plain HTTP, read
// nothing and write nothing.
func TestAMemberWithTLSServesOnlyClientsWithACertificateOfItsCA(t *testing.T) {
	dir := pkiFiles(t)
	client, peer := freeURL(t), freeURL(t)
	client.Scheme, peer.Scheme = "https", "https"
	e, err := embedded.Start(embedded.Config{Dir: t.TempDir(), Client: client, Peer: peer, TLS: &embedded.TLS{
		CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "etcd.pem"), Key: filepath.Join(dir, "etcd-key.pem"),
	}})
	require.NoError(t, err)
	t.Cleanup(e.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dial := func(cfg *tls.Config) *clientv3.Client {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{client.String()}, TLS: cfg, Logger: zap.NewNop()})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	operator := dial(clientTLS(t, dir, dir, "cli"))
	_, err = operator.Put(ctx, "/plugvisor/volumes/default/db", "the secret")
	require.NoError(t, err)

	stranger := pkiFiles(t)
	for name, cfg := range map[string]*tls.Config{
		"no certificate":           clientTLS(t, dir, "", ""),
		"another CA's certificate": clientTLS(t, dir, stranger, "cli"),
	} {
		t.Run(name, func(t *testing.T) {
			c := dial(cfg)
			short, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			_, err := c.Get(short, "/plugvisor/", clientv3.WithPrefix())
			require.Error(t, err, "read")
			_, err = c.Put(short, "/plugvisor/volumes/default/db", "forged")
			require.Error(t, err, "write")

			conn, err := tls.Dial("tcp", client.Host, cfg)
			if err == nil { // TLS 1.3: the server's refusal comes with the first read
				_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
				_, err = conn.Read(make([]byte, 1))
				_ = conn.Close()
			}
			require.ErrorContains(t, err, "certificate required", "the member refuses the handshake")
		})
	}
	t.Run("plain HTTP", func(t *testing.T) {
		plain := *client
		plain.Scheme, plain.Path = "http", "/v3/kv/range"
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Post(plain.String(), "application/json", strings.NewReader(`{"key":"Lw=="}`))
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			require.NotEqual(t, http.StatusOK, resp.StatusCode, "%s", body)
			require.NotContains(t, string(body), "secret")
		}
	})

	resp, err := operator.Get(ctx, "/plugvisor/volumes/default/db")
	require.NoError(t, err)
	require.Equal(t, "the secret", string(resp.Kvs[0].Value), "nothing forged")
}

func TestAMembersTLSIsCheckedBeforeItStarts(t *testing.T) {
	dir := pkiFiles(t)
	good := embedded.TLS{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "etcd.pem"), Key: filepath.Join(dir, "etcd-key.pem")}
	https, _ := url.Parse("https://127.0.0.1:2379")
	plain, _ := url.Parse("http://127.0.0.1:2380")
	for _, c := range []struct {
		name         string
		client, peer *url.URL
		tls          embedded.TLS
		want         string
	}{
		{"an http URL with TLS", https, plain, good, "http://127.0.0.1:2380 with TLS: the URL's scheme does not match the TLS setting: give https://127.0.0.1:2380"},
		{"a missing CA", https, https, embedded.TLS{CA: dir + "/none.pem", Cert: good.Cert, Key: good.Key}, "TLS CA: open " + dir + "/none.pem"},
		{"a key that is not the certificate's", https, https, embedded.TLS{CA: good.CA, Cert: good.Cert, Key: filepath.Join(dir, "cli-key.pem")}, "private key does not match public key"},
		{"a peer key alone", https, https, embedded.TLS{CA: good.CA, Cert: good.Cert, Key: good.Key, PeerKey: good.Key}, `certificate "" and key`},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := t.TempDir()
			tlsCfg := c.tls
			_, err := embedded.Start(embedded.Config{Dir: data, Client: c.client, Peer: c.peer, TLS: &tlsCfg})
			require.ErrorContains(t, err, c.want)
			require.NoDirExists(t, data+"/member", "nothing was written")
		})
	}
	_, err := embedded.Start(embedded.Config{Dir: t.TempDir(), Client: https, Peer: https})
	require.ErrorIs(t, err, embedded.ErrScheme, "https without TLS")
}
