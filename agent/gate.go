package agent

import (
	"context"
	"fmt"
	"net"

	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/internal/httpgate"
)

// gateConfig are l's caps for a listener's gate, with or without TLS.
func (l HTTPLimits) gateConfig(tls bool) httpgate.Config {
	c := httpgate.Config{MaxConns: l.MaxConns, ReservedConns: l.ReservedConns, MaxConnsPerPeer: l.MaxConnsPerPeer,
		MaxStreams: l.MaxStreams, HeaderTimeout: l.ReadHeaderTimeout, ReadTimeout: l.ReadTimeout, MinBodyRate: l.MinBodyRate}
	if tls {
		c.HandshakeTimeout = l.TLSHandshakeTimeout
	}
	return c
}

// connContext is the server's ConnContext for s: the gate's, with the
// listener's stream limit, whose refusal names the flag that raises it.
func (s served) connContext(ctx context.Context, nc net.Conn) context.Context {
	open := func() (func(), error) {
		release, ok := s.gate.OpenStream()
		if !ok {
			return nil, fmt.Errorf("%w: %d are open on %s, its limit (agent flag -http-max-streams); close one, or raise the limit",
				api.ErrStreamLimit, s.maxStreams, s.policy.Name)
		}
		return release, nil
	}
	return api.WithStreamLimit(s.gate.ConnContext(ctx, nc), open)
}
