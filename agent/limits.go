package agent

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

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
