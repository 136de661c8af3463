package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"

	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/registry"
)

// ErrUnprotectedHTTP: the TCP listener would serve the API without the
// protection its address needs, and -http-insecure was not given.
var ErrUnprotectedHTTP = errors.New("agent: refusing to serve the API on TCP unprotected")

// HTTPLimits bound what clients can hold of the API server, on every
// listener. Zero fields take the defaults; negative ones are an error.
type HTTPLimits struct {
	// ReadHeaderTimeout bounds reading a request's headers (default 10s).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included (default
	// 30s): a client that trickles a body is cut off.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from its headers to the end of its
	// answer (default 5m: a mount waits on CSI calls of up to 2 minutes
	// each). The event stream instead bounds each write by
	// api.StreamWriteTimeout.
	WriteTimeout time.Duration
	// IdleTimeout closes a kept-alive connection idle this long (default 2m).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers (default 64 KiB).
	MaxHeaderBytes int
	// MaxConns caps the open connections of each listener (default 256).
	// Further clients wait in the kernel's accept queue, costing the agent
	// nothing.
	MaxConns int
}

func (l HTTPLimits) validate() error {
	var problems []error
	for name, d := range map[string]time.Duration{"ReadHeaderTimeout": l.ReadHeaderTimeout, "ReadTimeout": l.ReadTimeout,
		"WriteTimeout": l.WriteTimeout, "IdleTimeout": l.IdleTimeout} {
		if d < 0 {
			problems = append(problems, fmt.Errorf("%w: HTTPLimits.%s is %v; give a positive duration, or 0 for the default", ErrInvalidConfig, name, d))
		}
	}
	for name, n := range map[string]int{"MaxHeaderBytes": l.MaxHeaderBytes, "MaxConns": l.MaxConns} {
		if n < 0 {
			problems = append(problems, fmt.Errorf("%w: HTTPLimits.%s is %d; give a positive number, or 0 for the default", ErrInvalidConfig, name, n))
		}
	}
	return errors.Join(problems...)
}

func (l HTTPLimits) withDefaults() HTTPLimits {
	orDuration := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	orDuration(&l.ReadHeaderTimeout, 10*time.Second)
	orDuration(&l.ReadTimeout, 30*time.Second)
	orDuration(&l.WriteTimeout, 5*time.Minute)
	orDuration(&l.IdleTimeout, 2*time.Minute)
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = 64 << 10
	}
	if l.MaxConns == 0 {
		l.MaxConns = 256
	}
	return l
}

// validateHTTP checks the API settings before anything starts.
func (c Config) validateHTTP() error {
	problems := []error{c.HTTPLimits.validate()}
	bad := func(format string, args ...any) {
		problems = append(problems, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	tlsGiven := c.TLSCert != "" || c.TLSKey != "" || c.TLSCA != ""
	if c.HTTPAddr == "" {
		if tlsGiven || c.TokenFile != "" || len(c.HTTPHosts) > 0 || c.HTTPInsecure {
			bad("-tls-cert, -tls-key, -tls-ca, -token-file, -http-host and -http-insecure apply to the TCP listener; give -http too")
		}
		return errors.Join(problems...)
	}
	if tlsGiven {
		var missing []string
		for _, f := range []struct{ flag, value string }{{"-tls-cert", c.TLSCert}, {"-tls-key", c.TLSKey}, {"-tls-ca", c.TLSCA}} {
			if f.value == "" {
				missing = append(missing, f.flag)
			}
		}
		if len(missing) > 0 {
			bad("TLS needs -tls-cert, -tls-key and -tls-ca together; %s missing", strings.Join(missing, " and "))
		}
	}
	for _, h := range c.HTTPHosts {
		if h == "" || strings.ContainsAny(h, ":/[] ") {
			bad("-http-host %q must be a bare host name, without port or scheme, e.g. node1.example.com", h)
		}
	}
	return errors.Join(problems...)
}

// served is one listener with the policy it is served under.
type served struct {
	listener net.Listener
	policy   api.Listener
}

// serveAPI listens on the unix socket and, when configured, on TCP, and
// serves the API on each under its policy and the HTTP limits.
func (a *Agent) serveAPI() error {
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	apiServer := &api.Server{
		Registry: a.registry,
		CSI:      a.csi,
		Catalog:  a.catalog,
		Volumes:  a.volumes,
		OnMount:  a.metrics.observeMount,
		Health:   a.health,
		Metrics:  promhttp.HandlerFor(a.metrics.reg, promhttp.HandlerOpts{}),
		Logger:   a.log.Named("api"),
	}
	limits := a.cfg.HTTPLimits
	listeners, err := a.listen()
	if err != nil {
		return err
	}
	errorLog := a.log.Named("http").StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug})
	for _, s := range listeners {
		srv := &http.Server{
			Handler:           apiServer.HandlerFor(s.policy),
			ReadHeaderTimeout: limits.ReadHeaderTimeout,
			ReadTimeout:       limits.ReadTimeout,
			WriteTimeout:      limits.WriteTimeout,
			IdleTimeout:       limits.IdleTimeout,
			MaxHeaderBytes:    limits.MaxHeaderBytes,
			ErrorLog:          errorLog,
			BaseContext:       func(net.Listener) context.Context { return ctx },
		}
		a.servers = append(a.servers, srv)
		go func() {
			if err := srv.Serve(s.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
				a.log.Error("API server stopped", "listener", s.policy.Name, "error", err)
			}
		}()
	}
	return nil
}

// listen opens the API's listeners, each capped at MaxConns connections.
func (a *Agent) listen() ([]served, error) {
	socket := a.SocketPath()
	if err := registry.ValidateSocketPath(socket); err != nil {
		return nil, fmt.Errorf("agent: API socket: %w; use a shorter data dir", err)
	}
	// The state file's lock proves no other agent owns this dir: a socket
	// file left here is stale.
	_ = os.Remove(socket)
	unixListener, err := listenUnix(socket)
	if err != nil {
		return nil, fmt.Errorf("agent: API socket: %w", err)
	}
	max := a.cfg.HTTPLimits.MaxConns
	out := []served{{
		listener: netutil.LimitListener(unixListener, max),
		// The socket's mode (0600) admits only the agent's user: no token.
		policy: api.Listener{Name: "unix socket " + socket, Hosts: UnixHosts},
	}}
	if a.cfg.HTTPAddr == "" {
		return out, nil
	}
	tcp, err := a.listenTCP()
	if err != nil {
		_ = unixListener.Close()
		return nil, err
	}
	return append(out, tcp), nil
}

// UnixHosts are the Host header values that name the API's unix socket.
// The CLI sends the first; curl --unix-socket sends "localhost".
var UnixHosts = []string{"plugvisor", "localhost"}

// umaskMu serializes the umask changes of listenUnix: the umask is the
// process's.
var umaskMu sync.Mutex

// listenUnix creates the unix socket at path under umask 0177, so that it
// has mode 0600 from the moment it exists: there is no window in which
// another user could connect. Files that other goroutines create in that
// instant get a stricter mode than they asked for, never a looser one.
func listenUnix(path string) (net.Listener, error) {
	umaskMu.Lock()
	defer umaskMu.Unlock()
	old := syscall.Umask(0o177)
	defer syscall.Umask(old)
	return net.Listen("unix", path)
}

// listenTCP opens the -http listener, refusing to serve it with less
// protection than its address needs:
//   - beyond loopback: TLS with client certificates verified against
//     -tls-ca;
//   - on loopback, where any local user or process can connect: ACL
//     tokens or TLS;
//
// unless -http-insecure is given, in which case every start logs a warning
// saying what is unprotected. ACL tokens, when given, are required on this
// listener whatever its address.
func (a *Agent) listenTCP() (served, error) {
	cfg := a.cfg
	tlsConfig, err := cfg.tlsConfig()
	if err != nil {
		return served{}, err
	}
	var tokens *api.Tokens
	if cfg.TokenFile != "" {
		if tokens, err = api.LoadTokens(cfg.TokenFile); err != nil {
			return served{}, fmt.Errorf("agent: -token-file: %w", err)
		}
	}
	// Refuse before binding, so that an unprotected address is never
	// open, even for a moment.
	missing := unprotected(loopbackOnly(cfg.HTTPAddr), tlsConfig != nil, tokens != nil)
	if missing != "" && !cfg.HTTPInsecure {
		return served{}, fmt.Errorf("%w: -http %s %s; or give -http-insecure to serve it so anyway (not recommended)",
			ErrUnprotectedHTTP, cfg.HTTPAddr, missing)
	}
	l, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return served{}, fmt.Errorf("agent: -http %s: %w", cfg.HTTPAddr, err)
	}
	addr := l.Addr().(*net.TCPAddr)
	if missing == "" && !addr.IP.IsLoopback() && tlsConfig == nil {
		// The name resolved differently between the check and the bind.
		_ = l.Close()
		return served{}, fmt.Errorf("%w: -http %s is bound to %s, beyond this host, without TLS; give -tls-cert, -tls-key and -tls-ca",
			ErrUnprotectedHTTP, cfg.HTTPAddr, addr)
	}
	if missing != "" {
		a.log.Warn("INSECURE: -http-insecure is set and the API on TCP is unprotected: anyone who can reach "+
			"this address can register plugins and mount volumes as this agent's user", "listener", addr.String(), "needed", missing)
	}
	port := strconv.Itoa(addr.Port)
	hosts := []string{net.JoinHostPort("localhost", port)}
	if name, _, err := net.SplitHostPort(cfg.HTTPAddr); err == nil && name != "" && net.ParseIP(name) == nil {
		hosts = append(hosts, net.JoinHostPort(name, port))
	}
	for _, h := range cfg.HTTPHosts {
		hosts = append(hosts, net.JoinHostPort(h, port))
	}
	a.httpAddr = addr.String()
	listener := netutil.LimitListener(l, cfg.HTTPLimits.MaxConns)
	scheme := "http"
	if tlsConfig != nil {
		listener, scheme = tls.NewListener(listener, tlsConfig), "https"
	}
	return served{listener: listener, policy: api.Listener{
		Name: scheme + " " + addr.String(), Hosts: hosts, Port: port, Tokens: tokens,
	}}, nil
}

// loopbackOnly says whether hostport can only be reached from this host:
// its host is a loopback IP, or a name that resolves to loopback IPs only.
// An empty host or the unspecified address listens everywhere.
func loopbackOnly(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil || host == "" {
		return false
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	ips, err := net.LookupIP(host)
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return false
		}
	}
	return true
}

// unprotected says what a TCP listener lacks, or "" when it has what its
// address needs.
func unprotected(loopback, hasTLS, hasTokens bool) string {
	switch {
	case !loopback && !hasTLS:
		return "reaches beyond this host without TLS: give -tls-cert, -tls-key and -tls-ca (client certificates are verified against the CA)"
	case loopback && !hasTLS && !hasTokens:
		return "is open to every local user and process: give -token-file (or TLS with -tls-cert, -tls-key and -tls-ca)"
	}
	return ""
}

// tlsConfig is the TCP listener's TLS: the agent's certificate, and client
// certificates required and verified against -tls-ca. Nil without TLS
// flags.
func (c Config) tlsConfig() (*tls.Config, error) {
	if c.TLSCert == "" && c.TLSKey == "" && c.TLSCA == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("agent: -tls-cert %s, -tls-key %s: %w", c.TLSCert, c.TLSKey, err)
	}
	caPEM, err := os.ReadFile(c.TLSCA)
	if err != nil {
		return nil, fmt.Errorf("agent: -tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%w: -tls-ca %s holds no PEM certificate; give the CA that signs client certificates",
			ErrInvalidConfig, c.TLSCA)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		NextProtos:   []string{"http/1.1"},
	}, nil
}

// HTTPAddr is the address the TCP listener is bound to (the port chosen
// for port 0), or "" without -http.
func (a *Agent) HTTPAddr() string { return a.httpAddr }
