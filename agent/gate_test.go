package agent_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/internal/slowclients"
)

// attack holds n slow clients from dial until the test ends.
func attack(t *testing.T, n int, dial func(context.Context) (net.Conn, error), send string) *slowclients.Crowd {
	c := slowclients.Hold(n, dial, send)
	t.Cleanup(c.Stop)
	return c
}

// waitFor polls cond until it holds, failing after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "waited a minute for %s", what)
	}
}

// slowLimits are caps small enough for a test, with header and handshake
// deadlines long enough that only the gate can make room in time.
var slowLimits = agent.HTTPLimits{MaxConns: 20, ReservedConns: 5, MaxConnsPerPeer: 20,
	ReadHeaderTimeout: time.Minute, TLSHandshakeTimeout: time.Minute}

func TestSlowUnauthenticatedClientsCannotKeepAValidClientsNewConnectionOut(t *testing.T) {
	const attackers = 60
	p := newPKI(t)
	tcpDial := func(a *agent.Agent) func(context.Context) (net.Conn, error) {
		return func(ctx context.Context) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", a.HTTPAddr())
		}
	}
	cases := []struct {
		name   string
		cfg    agent.Config
		dial   func(*agent.Agent) func(context.Context) (net.Conn, error)
		send   string
		client func(*agent.Agent) (*http.Client, string)
	}{
		{"unix socket, bodies sent one byte of 100000", agent.Config{},
			func(a *agent.Agent) func(context.Context) (net.Conn, error) {
				return func(ctx context.Context) (net.Conn, error) {
					return (&net.Dialer{}).DialContext(ctx, "unix", a.SocketPath())
				}
			},
			"POST /v1/plugins HTTP/1.1\r\nHost: plugvisor\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{",
			func(a *agent.Agent) (*http.Client, string) {
				c := unixClient(t, a)
				c.Transport.(*http.Transport).DisableKeepAlives = true
				return c, "http://plugvisor"
			}},
		{"TCP with tokens, headers never finished and no token", agent.Config{HTTPAddr: "127.0.0.1:0", TokenFile: tokenFile(t)},
			tcpDial, "GET /v1/health HTTP/1.1\r\nHost: loc",
			func(a *agent.Agent) (*http.Client, string) {
				return httpClient(t, &http.Transport{DisableKeepAlives: true}), "http://" + a.HTTPAddr()
			}},
		{"TLS, no ClientHello ever", agent.Config{HTTPAddr: "127.0.0.1:0", TokenFile: tokenFile(t),
			TLSCert: p.certFile, TLSKey: p.keyFile, TLSCA: p.caFile},
			tcpDial, "",
			func(a *agent.Agent) (*http.Client, string) {
				c := p.client(t, p.issue(t, "ops", x509.ExtKeyUsageClientAuth))
				c.Transport.(*http.Transport).DisableKeepAlives = true
				return c, "https://" + a.HTTPAddr()
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.HTTPLimits = slowLimits
			a := startWith(t, tc.cfg)
			s := attack(t, attackers, tc.dial(a), tc.send)
			// The attackers, three times the connection cap, are all in.
			waitFor(t, "the attackers to connect", func() bool { return s.Opened.Load() >= attackers })
			c, base := tc.client(a)
			for i := range 5 {
				status, body, err := call(c, "GET", base+"/v1/health", writeToken, "")
				require.NoError(t, err, "health on new connection %d", i)
				require.Equal(t, http.StatusOK, status, body)
			}
		})
	}
}

func TestTheStreamCapAnswers429AndRequestsKeepTheirConnections(t *testing.T) {
	a := startWith(t, agent.Config{HTTPLimits: agent.HTTPLimits{MaxConns: 8, MaxStreams: 3}})
	open := func() (*http.Response, error) {
		c := unixClient(t, a)
		c.Timeout = 0
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		req, err := http.NewRequestWithContext(ctx, "GET", "http://plugvisor/v1/events", nil)
		require.NoError(t, err)
		return c.Do(req)
	}
	var streams []*http.Response
	for range 3 {
		resp, err := open()
		require.NoError(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		require.Equal(t, http.StatusOK, resp.StatusCode)
		streams = append(streams, resp)
	}
	refused, err := open()
	require.NoError(t, err)
	body, err := io.ReadAll(refused.Body)
	refused.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusTooManyRequests, refused.StatusCode, string(body))
	require.Contains(t, string(body), "-http-max-streams")

	// Requests on new connections still get answers, again and again.
	for range 10 {
		c := unixClient(t, a)
		c.Transport.(*http.Transport).DisableKeepAlives = true
		status, body, err := call(c, "GET", "http://plugvisor/v1/health", "", "")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status, body)
	}

	// A stream that ends gives its slot back.
	streams[0].Body.Close()
	waitFor(t, "a stream slot to come back", func() bool {
		resp, err := open()
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// silent opens n connections from local IP ip to addr that send nothing.
func silent(t *testing.T, ip, addr string, n int) []net.Conn {
	t.Helper()
	var conns []net.Conn
	for range n {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		c, err := d.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
	}
	return conns
}

// closedByAgent says whether the agent has closed c, waiting up to wait.
func closedByAgent(c net.Conn, wait time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return !errors.As(err, &ne) || !ne.Timeout()
}

func TestAPeerBeyondItsShareClosesItsOwnStalledConnections(t *testing.T) {
	a := startWith(t, agent.Config{HTTPAddr: "127.0.0.1:0", TokenFile: tokenFile(t),
		HTTPLimits: agent.HTTPLimits{MaxConns: 20, MaxConnsPerPeer: 4, ReadHeaderTimeout: time.Minute}})
	health := func(ip string) {
		t.Helper()
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		c := httpClient(t, &http.Transport{DisableKeepAlives: true, DialContext: d.DialContext})
		status, body, err := call(c, "GET", "http://"+a.HTTPAddr()+"/v1/health", readToken, "")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status, body)
	}
	stillOpen := func(conns []net.Conn) (open []net.Conn) {
		for _, c := range conns {
			if !closedByAgent(c, 200*time.Millisecond) {
				open = append(open, c)
			}
		}
		return open
	}
	crowd := silent(t, "127.0.0.1", a.HTTPAddr(), 4)
	require.Len(t, stillOpen(crowd), 4)

	// A fifth client from the same IP closes one of its four.
	health("127.0.0.1")
	crowd = stillOpen(crowd)
	require.Len(t, crowd, 3, "one of the peer's own stalled connections made room")

	// Another IP, within its share, takes nothing from the first.
	other := silent(t, "127.0.0.2", a.HTTPAddr(), 3)
	health("127.0.0.2")
	require.Len(t, stillOpen(crowd), 3)
	require.Len(t, stillOpen(other), 3)
}

func TestATLSHandshakeNotDoneInTimeIsCutButAFinishedOneIsNot(t *testing.T) {
	p := newPKI(t)
	a := startWith(t, agent.Config{HTTPAddr: "127.0.0.1:0", TLSCert: p.certFile, TLSKey: p.keyFile, TLSCA: p.caFile,
		HTTPLimits: agent.HTTPLimits{TLSHandshakeTimeout: 300 * time.Millisecond, ReadHeaderTimeout: time.Minute}})
	quiet := silent(t, "127.0.0.1", a.HTTPAddr(), 1)[0]
	start := time.Now()
	require.True(t, closedByAgent(quiet, 30*time.Second), "a client that never says hello is cut")
	require.Less(t, time.Since(start), 20*time.Second, "by the handshake timeout, not the header timeout")

	// A client that finishes its handshake may then take its time.
	tr := p.client(t, p.issue(t, "ops", x509.ExtKeyUsageClientAuth)).Transport.(*http.Transport)
	tlsConn, err := tls.Dial("tcp", a.HTTPAddr(), tr.TLSClientConfig)
	require.NoError(t, err)
	defer tlsConn.Close()
	require.NoError(t, tlsConn.Handshake())
	time.Sleep(time.Second) // past the handshake deadline
	_, err = fmt.Fprintf(tlsConn, "GET /v1/health HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", a.HTTPAddr())
	require.NoError(t, err)
	got, err := io.ReadAll(tlsConn)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(got), "HTTP/1.1 200"), "%s", got)
}

func TestASlowBodyIsCutAndAPacedOneIsServed(t *testing.T) {
	a := startWith(t, agent.Config{HTTPLimits: agent.HTTPLimits{MinBodyRate: 1000,
		ReadHeaderTimeout: 300 * time.Millisecond, ReadTimeout: time.Minute}})
	slow, err := net.Dial("unix", a.SocketPath())
	require.NoError(t, err)
	defer slow.Close()
	start := time.Now()
	_, err = io.WriteString(slow, "POST /v1/plugins HTTP/1.1\r\nHost: plugvisor\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
	require.NoError(t, err)
	_ = slow.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, _ := io.ReadAll(slow)
	require.NotContains(t, string(got), "HTTP/1.1 200")
	require.Less(t, time.Since(start), 20*time.Second, "cut by the body rate, well before the read timeout")

	// A body that arrives above the rate, though after the grace, is served.
	body := plugin + strings.Repeat(" ", 2000)
	conn, err := net.Dial("unix", a.SocketPath())
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST /v1/plugins HTTP/1.1\r\nHost: plugvisor\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", len(body))
	require.NoError(t, err)
	for chunk := range chunks(body, 200) {
		_, err = io.WriteString(conn, chunk)
		require.NoError(t, err)
		time.Sleep(50 * time.Millisecond) // 4000 bytes a second, for half a second
	}
	got, err = io.ReadAll(conn)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(got), "HTTP/1.1 200"), "%s", got)
}

// chunks cuts s into pieces of n bytes.
func chunks(s string, n int) func(func(string) bool) {
	return func(yield func(string) bool) {
		for len(s) > 0 {
			k := min(n, len(s))
			if !yield(s[:k]) {
				return
			}
			s = s[k:]
		}
	}
}

func TestTheNewLimitsRefuseNegativesAndStreamsAtTheConnectionCap(t *testing.T) {
	cases := []struct {
		name   string
		limits agent.HTTPLimits
		want   string
	}{
		{"a negative handshake timeout", agent.HTTPLimits{TLSHandshakeTimeout: -1}, "TLSHandshakeTimeout is -1ns (flag -http-tls-handshake-timeout)"},
		{"a negative body rate", agent.HTTPLimits{MinBodyRate: -1}, "MinBodyRate is -1 (flag -http-min-body-rate)"},
		{"negative reserved connections", agent.HTTPLimits{ReservedConns: -1}, "ReservedConns is -1 (flag -http-reserved-conns)"},
		{"a negative peer cap", agent.HTTPLimits{MaxConnsPerPeer: -2}, "MaxConnsPerPeer is -2 (flag -http-max-conns-per-peer)"},
		{"a negative stream cap", agent.HTTPLimits{MaxStreams: -3}, "MaxStreams is -3 (flag -http-max-streams)"},
		{"a negative header timeout", agent.HTTPLimits{ReadHeaderTimeout: -time.Second}, "ReadHeaderTimeout is -1s (flag -http-header-timeout)"},
		{"streams as many as connections", agent.HTTPLimits{MaxConns: 10, MaxStreams: 10},
			"MaxStreams is 10 (flag -http-max-streams), not below MaxConns 10"},
		{"every connection reserved", agent.HTTPLimits{MaxConns: 10, ReservedConns: 12}, "ReservedConns is 12 (flag -http-reserved-conns)"},
		{"one connection", agent.HTTPLimits{MaxConns: 1}, "give at least 2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := agent.Start(agent.Config{DataDir: dataDir(t), HTTPLimits: tc.limits})
			require.ErrorIs(t, err, agent.ErrInvalidConfig)
			require.ErrorContains(t, err, tc.want)
		})
	}
}
