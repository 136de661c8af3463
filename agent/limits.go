package agent

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// HTTPLimits bound what clients can hold of the API server, on every
// listener. Zero fields take the defaults; negative ones are an error.
// Before a client has proved itself (see internal/httpgate), it holds a
// connection under the short deadlines below and may be closed to make
// room for another.
type HTTPLimits struct {
	// ReadHeaderTimeout bounds reading a request's headers (default 5s);
	// it is also the grace a body gets before MinBodyRate applies, and how
	// long a new connection to a crowded listener may wait aside for its
	// request.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a request's body, from the moment its
	// headers are in (default 30s). It never ends a request whose body
	// has arrived: a mount waits on its plugin for as long as the volume
	// operation timeout, and WriteTimeout bounds its answer.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from its headers to the end of its
	// answer (default 5m: a mount waits on CSI calls of up to 2 minutes
	// each). Keep it above Config.VolumeOperationTimeout, or an operation
	// that times out cannot say so. The event stream instead bounds each
	// write by api.StreamWriteTimeout.
	WriteTimeout time.Duration
	// IdleTimeout closes a kept-alive connection idle this long (default 2m).
	IdleTimeout time.Duration
	// TLSHandshakeTimeout bounds a TLS handshake from the connection's
	// accept (default 5s).
	TLSHandshakeTimeout time.Duration
	// MinBodyRate is the slowest a request body may arrive, in bytes a
	// second, once ReadHeaderTimeout has passed (default 1024): a client
	// that trickles a body is cut off.
	MinBodyRate int
	// MaxHeaderBytes bounds a request's headers (default 64 KiB).
	MaxHeaderBytes int
	// MaxConns caps the connections each listener serves (default 256).
	// While it is crowded, up to 16 more per slot wait aside for their
	// request, a file descriptor and a parked goroutine each.
	MaxConns int
	// ReservedConns of the MaxConns are kept for clients that proved
	// themselves (default a quarter of MaxConns): the others may hold at
	// most MaxConns-ReservedConns.
	ReservedConns int
	// MaxConnsPerPeer caps the connections one TCP peer (IP address) holds
	// before they prove themselves (default half of MaxConns).
	MaxConnsPerPeer int
	// MaxStreams caps the event streams of each listener (default a
	// quarter of MaxConns); it must be below MaxConns, so that requests
	// always find a connection.
	MaxStreams int
}

// httpLimitFlags names each limit's agent flag.
var httpLimitFlags = map[string]string{
	"ReadHeaderTimeout":   "-http-header-timeout",
	"TLSHandshakeTimeout": "-http-tls-handshake-timeout", "MinBodyRate": "-http-min-body-rate",
	"MaxConns": "-http-max-conns", "ReservedConns": "-http-reserved-conns",
	"MaxConnsPerPeer": "-http-max-conns-per-peer", "MaxStreams": "-http-max-streams",
}

// flagOf is " (flag -x)" for a limit with a flag.
func flagOf(name string) string {
	if f, ok := httpLimitFlags[name]; ok {
		return " (flag " + f + ")"
	}
	return ""
}

func (l HTTPLimits) validate() error {
	var problems []error
	for name, d := range map[string]time.Duration{"ReadHeaderTimeout": l.ReadHeaderTimeout, "ReadTimeout": l.ReadTimeout,
		"WriteTimeout": l.WriteTimeout, "IdleTimeout": l.IdleTimeout, "TLSHandshakeTimeout": l.TLSHandshakeTimeout} {
		if d < 0 {
			problems = append(problems, fmt.Errorf("%w: HTTPLimits.%s is %v%s; give a positive duration, or 0 for the default",
				ErrInvalidConfig, name, d, flagOf(name)))
		}
	}
	for name, n := range map[string]int{"MaxHeaderBytes": l.MaxHeaderBytes, "MaxConns": l.MaxConns, "MinBodyRate": l.MinBodyRate,
		"ReservedConns": l.ReservedConns, "MaxConnsPerPeer": l.MaxConnsPerPeer, "MaxStreams": l.MaxStreams} {
		if n < 0 {
			problems = append(problems, fmt.Errorf("%w: HTTPLimits.%s is %d%s; give a positive number, or 0 for the default",
				ErrInvalidConfig, name, n, flagOf(name)))
		}
	}
	if len(problems) > 0 {
		return errors.Join(problems...)
	}
	d := l.withDefaults()
	if d.MaxConns < 2 {
		problems = append(problems, fmt.Errorf("%w: HTTPLimits.MaxConns is %d (flag -http-max-conns); give at least 2, "+
			"one of them kept for clients that proved themselves", ErrInvalidConfig, d.MaxConns))
	}
	for name, n := range map[string]int{"ReservedConns": d.ReservedConns, "MaxStreams": d.MaxStreams} {
		if n >= d.MaxConns {
			problems = append(problems, fmt.Errorf("%w: HTTPLimits.%s is %d%s, not below MaxConns %d (flag -http-max-conns); "+
				"give a smaller number, so that requests keep connections of their own", ErrInvalidConfig, name, n, flagOf(name), d.MaxConns))
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
	orDuration(&l.ReadHeaderTimeout, 5*time.Second)
	orDuration(&l.ReadTimeout, 30*time.Second)
	orDuration(&l.WriteTimeout, 5*time.Minute)
	orDuration(&l.IdleTimeout, 2*time.Minute)
	orDuration(&l.TLSHandshakeTimeout, 5*time.Second)
	orInt := func(n *int, def int) {
		if *n == 0 {
			*n = max(def, 1)
		}
	}
	orInt(&l.MaxHeaderBytes, 64<<10)
	orInt(&l.MinBodyRate, 1024)
	orInt(&l.MaxConns, 256)
	orInt(&l.ReservedConns, l.MaxConns/4)
	orInt(&l.MaxConnsPerPeer, l.MaxConns/2)
	orInt(&l.MaxStreams, l.MaxConns/4)
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
