//go:build reliability

package reliability_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/internal/slowclients"
	"github.com/plugvisor/plugvisor/internal/testpki"
)

const (
	slowAttackers = 3000 // per listener
	healthProbes  = 300  // new connections, one every 40ms: past the 5s timeouts
	token         = "w-0123456789abcdef0123456789abcdef"
)

// raiseFileLimit lifts this process's open file limit to its hard limit,
// and skips the test when that is below need.
func raiseFileLimit(t *testing.T, need uint64) {
	t.Helper()
	var l syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l))
	if l.Cur < need {
		l.Cur = min(need, l.Max)
		require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l))
	}
	if l.Cur < need {
		t.Skipf("needs %d open files; the hard limit is %d", need, l.Max)
	}
}

// freeAddr is a loopback TCP address free at the time of the call.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// holdSlow holds n slow clients from dial (see slowclients.Hold) and
// waits, at most 2 minutes, until every one has connected once.
func holdSlow(t *testing.T, n int, dial func(context.Context) (net.Conn, error), send string) (closed *atomic.Int64, stop func()) {
	t.Helper()
	crowd := slowclients.Hold(n, dial, send)
	t.Cleanup(crowd.Stop)
	for deadline := time.Now().Add(2 * time.Minute); crowd.Opened.Load() < int64(n) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	return &crowd.Closed, crowd.Stop
}

// probeNew times healthProbes GETs of /v1/health by client, each on a new
// connection; a failure counts as an hour.
func probeNew(client *http.Client, url string) (p50, p99, worst time.Duration, failed int, firstErr string) {
	var took []time.Duration
	for range healthProbes {
		start := time.Now()
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		d := time.Since(start)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if err != nil || resp.StatusCode != http.StatusOK {
			if failed++; err != nil && firstErr == "" {
				firstErr = ", the first: " + err.Error()
			}
			d = time.Hour
		}
		took = append(took, d)
		time.Sleep(40 * time.Millisecond)
	}
	slices.Sort(took)
	return took[len(took)/2], took[len(took)*99/100], took[len(took)-1], failed, firstErr
}

// shown is a figure of probeNew for the table: a failure, which probeNew
// counts as an hour, says so.
func shown(d time.Duration) string {
	if d >= time.Hour {
		return "a failure"
	}
	return d.Round(time.Millisecond).String()
}

func TestSlowClientsOnEachListener(t *testing.T) {
	const overflow = 8000 // beyond what the agent holds aside (16 per slot)
	raiseFileLimit(t, overflow+1024)
	dir := shortDir(t)
	tokens := filepath.Join(dir, "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte(token+" write\n"), 0o600))
	ca := testpki.NewCA(t, "reliability CA")
	ca.WriteFiles(t, dir, "agent", ca.Issue(t, "agent", x509.ExtKeyUsageServerAuth))
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	tlsClient := &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{ca.Issue(t, "ops", x509.ExtKeyUsageClientAuth)}}

	headers := "GET /v1/health HTTP/1.1\r\nHost: loc"
	cases := []struct {
		listener, attack, send string
		attackers              int
		args                   []string
		tls                    bool
	}{
		{"unix socket", "each sending 1 of 100000 body bytes",
			"POST /v1/plugins HTTP/1.1\r\nHost: plugvisor\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{",
			slowAttackers, nil, false},
		{"TCP with tokens", "sending headers that never end, without a token", headers, slowAttackers,
			[]string{"-token-file", tokens}, false},
		{"TLS", "never sending a ClientHello", "", slowAttackers, []string{"-token-file", tokens,
			"-tls-cert", filepath.Join(dir, "agent.pem"), "-tls-key", filepath.Join(dir, "agent-key.pem"), "-tls-ca", filepath.Join(dir, "ca.pem")}, true},
		{"TCP with tokens, more than the agent holds aside", "sending headers that never end, without a token", headers, overflow,
			[]string{"-token-file", tokens}, false},
	}
	for _, tc := range cases {
		t.Run(tc.listener, func(t *testing.T) {
			addr := freeAddr(t)
			args := tc.args
			if tc.args != nil {
				args = append([]string{"-http", addr}, args...)
			}
			a := startAgent(t, shortDir(t), args...)
			network, target, url := "unix", filepath.Join(a.dir, "plugvisor.sock"), "http://plugvisor/v1/health"
			if tc.args != nil {
				network, target, url = "tcp", addr, "http://"+addr+"/v1/health"
			}
			transport := &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, target)
			}}
			if tc.tls {
				url = "https://" + addr + "/v1/health"
				transport.TLSClientConfig = tlsClient
			}
			client := &http.Client{Timeout: 10 * time.Second, Transport: transport}
			closed, stop := holdSlow(t, tc.attackers, func(ctx context.Context) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, target)
			}, tc.send)
			before := closed.Load()
			start := time.Now()
			p50, p99, worst, failed, firstErr := probeNew(client, url)
			churn := float64(closed.Load()-before) / time.Since(start).Seconds()
			stop()
			ok := failed == 0 && p99 < time.Second
			judged := verdict(ok)
			if tc.attackers > slowAttackers {
				judged = "reported" // beyond the target's 3000
			}
			report("slow clients: "+tc.listener, judged,
				"%d connections %s, reopened as the agent closes them (%.0f/s); %d /v1/health requests, each on a new connection: p50 %s, p99 %s, slowest %s, %d failed%s (the agent's defaults)",
				tc.attackers, tc.attack, churn, healthProbes, shown(p50), shown(p99), shown(worst), failed, firstErr)
			require.True(t, ok || tc.attackers > slowAttackers, "p99 %s, %d failed: %s", p99, failed, firstErr)
		})
	}
}

func TestTheStreamCap(t *testing.T) {
	const tries, cap = 300, 64 // cap: a quarter of the default -http-max-conns
	a := startAgent(t, shortDir(t))
	socket := filepath.Join(a.dir, "plugvisor.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ok, refused, other int
	var refusal string
	for range tries {
		c, err := (&net.Dialer{}).DialContext(ctx, "unix", socket)
		require.NoError(t, err)
		defer c.Close()
		_, err = io.WriteString(c, "GET /v1/events HTTP/1.1\r\nHost: plugvisor\r\n\r\n")
		require.NoError(t, err)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 4096)
		n, _ := c.Read(buf)
		switch head := string(buf[:n]); {
		case len(head) > 12 && head[9:12] == "200":
			ok++
		case len(head) > 12 && head[9:12] == "429":
			refused++
			refusal = head
		default:
			other++
		}
	}
	client := unixClient(socket, 10*time.Second)
	client.Transport.(*http.Transport).DisableKeepAlives = true
	p50, p99, worst, failed, _ := probeNew(client, "http://plugvisor/v1/health")
	named := refused > 0 && strings.Contains(refusal, "-http-max-streams")
	pass := ok == cap && refused == tries-cap && other == 0 && named && failed == 0 && p99 < time.Second
	report("event stream cap", verdict(pass),
		"%d streams asked on the unix socket: %d served (cap %d, -http-max-streams default), %d refused with 429 naming -http-max-streams %v, %d other; with them open, %d /v1/health on new connections: p50 %s, p99 %s, slowest %s, %d failed",
		tries, ok, cap, refused, named, other, healthProbes, p50.Round(time.Millisecond), p99.Round(time.Millisecond), worst.Round(time.Millisecond), failed)
	require.True(t, pass)
}
