package fleet

import (
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// ClientConfig is how a client of c's etcd dials it: c's endpoints,
// credentials and timeouts, keepalives every lease TTL, a reconnect
// backoff bounded by reconnectMax, and a stats handler that tells a write
// that was sent from one that was not (withSentMark). A member's cluster
// provider dials with it too.
func (c Config) ClientConfig() clientv3.Config {
	return clientv3.Config{
		Endpoints:            c.Endpoints,
		TLS:                  c.TLS,
		Username:             c.Username,
		Password:             c.Password,
		DialTimeout:          c.RequestTimeout,
		DialKeepAliveTime:    c.LeaseTTL,
		DialKeepAliveTimeout: c.RequestTimeout,
		DialOptions: []grpc.DialOption{grpc.WithStatsHandler(sentMarker{}), grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  reconnectBase,
				Multiplier: backoff.DefaultConfig.Multiplier,
				Jitter:     backoff.DefaultConfig.Jitter,
				MaxDelay:   reconnectMax(c.LeaseTTL),
			},
			MinConnectTimeout: c.RequestTimeout,
		})},
		Logger: zap.NewNop(),
	}
}

// reconnectBase is the wait before a client's first reconnect to etcd.
const reconnectBase = 250 * time.Millisecond

// reconnectMax is the longest wait between a client's reconnects to etcd:
// a quarter of the lease TTL, at least reconnectBase. gRPC's own grows to
// two minutes, so a node cut off for long stayed fenced and unheard for
// up to two minutes after the cut healed. An agent that tries every few
// seconds costs etcd one connection attempt each time.
func reconnectMax(ttl time.Duration) time.Duration {
	return max(ttl/4, reconnectBase)
}
