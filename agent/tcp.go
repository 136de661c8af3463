package agent

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/internal/httpgate"
)

// ErrUnprotectedHTTP: the TCP listener would serve the API without the
// protection its address needs, and -http-insecure was not given.
var ErrUnprotectedHTTP = errclass.New(errclass.Invalid, "refusing to serve the API on TCP unprotected")

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
			return served{}, fmt.Errorf("-token-file: %w", err)
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
		return served{}, fmt.Errorf("-http %s: %w", cfg.HTTPAddr, err)
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
	a.tcp = tcpListener{addr: addr.String(), tokens: tokens}
	scheme := "http"
	if tlsConfig != nil {
		scheme = "https"
	}
	policy := api.Listener{Name: scheme + " " + addr.String(), Hosts: hosts, Port: port, Tokens: tokens}
	g := httpgate.New(l, cfg.HTTPLimits.gateConfig(tlsConfig != nil))
	var listener net.Listener = g
	if tlsConfig != nil {
		listener = tls.NewListener(g, g.TLSConfig(tlsConfig))
	}
	return served{listener: listener, policy: policy, gate: g, maxStreams: cfg.HTTPLimits.MaxStreams}, nil
}

// ReloadTokens reads TokenFile again and puts its tokens in force on the
// TCP listener, for every request checked from then on (an event stream
// already open keeps going). A file that no longer loads changes nothing:
// the tokens in force stay, and the error says why. It returns how many
// tokens are in force, and 0 without a TokenFile. Call it while the agent
// runs, not during Shutdown.
func (a *Agent) ReloadTokens() (int, error) {
	if a.cfg.TokenFile == "" {
		return 0, nil
	}
	tokens, err := api.LoadTokens(a.cfg.TokenFile)
	if err != nil {
		return 0, fmt.Errorf("-token-file: %w", err)
	}
	if a.tcp.tokens == nil {
		return 0, fmt.Errorf("%w: -token-file is set but no TCP listener uses it; give -http too", ErrInvalidConfig)
	}
	a.tcp.tokens.Replace(tokens)
	return tokens.Len(), nil
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
		return nil, fmt.Errorf("-tls-cert %s, -tls-key %s: %w", c.TLSCert, c.TLSKey, err)
	}
	caPEM, err := os.ReadFile(c.TLSCA)
	if err != nil {
		return nil, fmt.Errorf("-tls-ca: %w", err)
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
func (a *Agent) HTTPAddr() string { return a.tcp.addr }

// tcpListener is what the agent keeps of its TCP listener once it serves.
type tcpListener struct {
	addr   string      // the bound address
	tokens *api.Tokens // the ACL tokens in force, which ReloadTokens replaces; nil without TokenFile
}
