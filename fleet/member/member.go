package member

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/plugvisor/plugvisor/actors"
)

// Defaults and limits of Config.
const (
	DefaultClusterName    = "plugvisor"
	DefaultPrefix         = "/plugvisor/"
	DefaultLeaseTTL       = 10 * time.Second
	MinLeaseTTL           = 2 * time.Second
	DefaultRequestTimeout = 5 * time.Second
)

// ErrInvalidConfig: a Config field is wrong; the error names it and the fix.
var ErrInvalidConfig = errors.New("member: invalid config")

// Config is what a member needs to join the cluster.
type Config struct {
	// Endpoints are the etcd client URLs the member keeps its membership
	// in; EtcdTLS, when set, is used to reach them.
	Endpoints []string
	EtcdTLS   *tls.Config
	// Address is the host:port protoactor remote listens on, and the
	// address the other members dial: an address of this host that they
	// can reach (127.0.0.1 in tests); port 0 picks a free port.
	Address string
	// TLS, when set, secures the remote: the server side serves
	// TLS.Server (set ClientAuth to tls.RequireAndVerifyClientCert and
	// ClientCAs for mTLS), the dialling side uses TLS.Client. Without it
	// the remote is plain gRPC, which Start accepts on loopback only.
	TLS *RemoteTLS
	// ClusterName separates clusters sharing one etcd (default "plugvisor").
	ClusterName string
	// Prefix is the etcd key prefix (default "/plugvisor/").
	Prefix string
	// LeaseTTL is how long the member stays in the topology after it stops
	// renewing its lease, as when it is killed (default 10 s, at least 2 s,
	// whole seconds).
	LeaseTTL time.Duration
	// RequestTimeout bounds each etcd call and each grain request
	// (default 5 s).
	RequestTimeout time.Duration
	// Logger receives the member's lines; protoactor's own go to it at
	// warning level and above only. Nil discards them.
	Logger hclog.Logger
}

// RemoteTLS is the TLS of the members' remote traffic.
type RemoteTLS struct {
	Server *tls.Config
	Client *tls.Config
}

func (c Config) validate() error {
	var problems []error
	bad := func(format string, args ...any) {
		problems = append(problems, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if len(c.Endpoints) == 0 {
		bad("Endpoints is empty: give the etcd client URLs")
	}
	host, port, err := net.SplitHostPort(c.Address)
	switch {
	case err != nil:
		bad("Address %q is not host:port (%v): give an address of this host the other members can reach, say 10.0.0.5:7946", c.Address, err)
	case host == "" || net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified():
		bad("Address %q listens on every interface: give one address of this host", c.Address)
	default:
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			bad("Address %q has no valid port: give a port from 0 (any free port) to 65535", c.Address)
		}
		if c.TLS == nil && !isLoopback(host) {
			bad("Address %q is not loopback and TLS is not set: the remote carries claims, so secure it with TLS", c.Address)
		}
	}
	if c.TLS != nil && (c.TLS.Server == nil || c.TLS.Client == nil) {
		bad("TLS needs both Server and Client configs")
	}
	if c.LeaseTTL != 0 && (c.LeaseTTL < MinLeaseTTL || c.LeaseTTL%time.Second != 0) {
		bad("LeaseTTL is %v: give whole seconds, at least %v (etcd leases count seconds)", c.LeaseTTL, MinLeaseTTL)
	}
	if c.RequestTimeout < 0 {
		bad("RequestTimeout is %v: give a positive duration, or 0 for %v", c.RequestTimeout, DefaultRequestTimeout)
	}
	return errors.Join(problems...)
}

func (c Config) withDefaults() Config {
	if c.ClusterName == "" {
		c.ClusterName = DefaultClusterName
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Member is this node's place in the protoactor cluster: an actor system
// with its remote, the cluster's gossip and identity lookup (disthash), and
// the membership provider on etcd. It hosts the grains that the rendezvous
// hash gives it.
type Member struct {
	cfg      Config
	system   *actor.ActorSystem
	cluster  *cluster.Cluster
	provider *provider
	// topology is the last member set protoactor published: MemberList
	// reads its own set without a lock, so the member keeps a copy.
	topology atomic.Pointer[[]*cluster.Member]
	stopped  sync.Once
	stopErr  error
}

// Start joins the cluster with the given kinds of grains. It returns when
// the member is registered in etcd and sees the members registered before
// it; protoactor's start-up takes about a second more than that.
func Start(cfg Config, kinds ...*cluster.Kind) (m *Member, err error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	host, portText, _ := net.SplitHostPort(cfg.Address)
	port, _ := strconv.Atoi(portText)

	system := actors.NewSystem(nil, actor.WithLoggerFactory(quietLogger(cfg.Logger)))
	etcd := clientv3.Config{Endpoints: cfg.Endpoints, TLS: cfg.EtcdTLS, DialTimeout: cfg.RequestTimeout, Logger: zap.NewNop()}
	p := newProvider(etcd, cfg.Prefix, cfg.ClusterName, cfg.LeaseTTL, cfg.RequestTimeout, cfg.Logger)
	rc := remote.Configure(host, port, remoteOptions(cfg.TLS)...)
	// protoactor's endpoint writer dials a peer up to MaxRetryCount times
	// and leaks the gRPC connection of every failed attempt but the last,
	// which then redials forever: a dead peer gets one attempt, whose
	// connection is closed with its writer.
	rc.MaxRetryCount = 1
	cc := cluster.Configure(cfg.ClusterName, p, disthash.New(), rc,
		cluster.WithKinds(kinds...),
		cluster.WithRequestTimeout(cfg.RequestTimeout),
	)
	c := cluster.New(system, cc)
	m = &Member{cfg: cfg, system: system, cluster: c, provider: p}
	m.topology.Store(&[]*cluster.Member{})
	system.EventStream.Subscribe(func(ev any) {
		if t, ok := ev.(*cluster.ClusterTopology); ok {
			members := slices.Clone(t.Members)
			m.topology.Store(&members)
		}
	})
	defer func() {
		// protoactor panics when the remote cannot listen or the provider
		// fails to start.
		if r := recover(); r != nil {
			_ = p.Shutdown(false)
			m.stopCluster()
			m, err = nil, fmt.Errorf("member: join the cluster at %s: %v", cfg.Address, r)
		}
	}()
	c.StartMember()
	cfg.Logger.Info("joined the cluster", "cluster", cfg.ClusterName, "member", system.ID, "address", system.Address())
	return m, nil
}

func remoteOptions(t *RemoteTLS) []remote.ConfigOption {
	if t == nil {
		return []remote.ConfigOption{remote.WithDialOptions(grpc.WithTransportCredentials(insecure.NewCredentials()))}
	}
	return []remote.ConfigOption{
		remote.WithServerOptions(grpc.Creds(credentials.NewTLS(t.Server))),
		remote.WithDialOptions(grpc.WithTransportCredentials(credentials.NewTLS(t.Client))),
	}
}

// ID is the member's ID in the cluster (its actor system's ID).
func (m *Member) ID() string { return m.system.ID }

// Address is the address the member's remote listens on.
func (m *Member) Address() string { return m.system.Address() }

// Cluster is the protoactor cluster, to send grain requests with.
func (m *Member) Cluster() *cluster.Cluster { return m.cluster }

// Members are the IDs of the members this member sees, itself included,
// in order.
func (m *Member) Members() []string {
	members := *m.topology.Load()
	ids := make([]string, len(members))
	for i, mem := range members {
		ids[i] = mem.Id
	}
	slices.Sort(ids)
	return ids
}

// Stop leaves the cluster: the member's key goes from etcd at once, its
// grains stop (the next request of each activates it on another member),
// and every goroutine of the member ends before Stop returns. It skips
// protoactor's fixed two-second wait for a graceful leave: the grains keep
// nothing that etcd does not hold.
// Stopping again does nothing and returns the first Stop's error.
func (m *Member) Stop() error {
	m.stopped.Do(func() {
		m.stopErr = m.provider.Shutdown(true)
		m.stopCluster()
		m.cfg.Logger.Info("left the cluster", "member", m.system.ID)
	})
	return m.stopErr
}

// stopCluster stops what protoactor started: the grains and the placement
// actor, the gossip, the connections to the other members, the remote's
// server, and the actor system.
//
// The connections close as when their members leave (an
// EndpointTerminatedEvent each), and the server stops hard: protoactor's
// graceful remote shutdown races with a member leaving at the same moment
// (endpointManager.stop clears the connection map that the handler of a
// lost connection reads, without a lock).
func (m *Member) stopCluster() {
	c := m.cluster
	if c.IdentityLookup != nil {
		c.IdentityLookup.Shutdown()
	}
	if c.Gossip != nil {
		c.Gossip.Shutdown()
	}
	if c.Remote != nil {
		for _, mem := range *m.topology.Load() {
			if mem.Id != m.system.ID {
				m.system.EventStream.Publish(&remote.EndpointTerminatedEvent{Address: mem.Address()})
			}
		}
		c.Remote.Shutdown(false)
	}
	m.system.Shutdown()
}

// quietLogger gives protoactor a logger that writes warnings and errors
// only, through l.
func quietLogger(l hclog.Logger) func(*actor.ActorSystem) *slog.Logger {
	return func(system *actor.ActorSystem) *slog.Logger {
		return slog.New(minLevel{actors.NewSlogHandler(l.Named("protoactor")), slog.LevelWarn}).With("system", system.ID)
	}
}

// minLevel is a slog handler that drops records below a level.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(attrs []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(attrs), h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h.Handler.WithGroup(name), h.min}
}
