package member

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
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
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/names"
)

// DefaultClusterName is the cluster's name when Config.ClusterName is empty.
const DefaultClusterName = "plugvisor"

// unstartedAddress is the address of an actor system whose remote has not
// started (protoactor's "nonhost").
const unstartedAddress = "nonhost"

// remoteQueueSize bounds the messages waiting for one peer, or for the
// remote's endpoint manager.
const remoteQueueSize = 16 << 10

// ErrInvalidConfig: a Config field is wrong; the error names it and the fix.
var ErrInvalidConfig = errclass.New(errclass.Invalid, "invalid cluster member config")

// Config is what a member needs to join the cluster.
type Config struct {
	// Fleet is this node's view of the fleet's state in etcd: the member
	// opens a fleet.Store with it for its grains and its Router, and keeps
	// its membership in the same etcd, under Fleet.Prefix, with a lease of
	// Fleet.LeaseTTL (whole seconds here) and calls bounded by
	// Fleet.RequestTimeout. Fleet.Logger is the member's logger too;
	// protoactor's own lines go to it at warning level and above only.
	Fleet fleet.Config
	// Address is the host:port protoactor remote listens on, and the
	// address the other members dial: an address of this host that they
	// can reach (127.0.0.1 in tests); port 0 picks a free port.
	Address string
	// Advertise, when set, is the host:port the other members dial
	// instead of Address: a NAT's, or a proxy's in front of it.
	Advertise string
	// TLS, when set, secures the remote: the server side serves
	// TLS.Server (set ClientAuth to tls.RequireAndVerifyClientCert and
	// ClientCAs for mTLS), the dialling side uses TLS.Client. Without it
	// the remote is plain gRPC, which Start accepts on loopback only.
	TLS *RemoteTLS
	// ClusterName separates clusters sharing one etcd (default "plugvisor").
	ClusterName string
	// GrainIdleTimeout is how long a volume grain waits for a request
	// before it stops, to be activated again by the next one (default
	// DefaultGrainIdleTimeout; at least a millisecond).
	GrainIdleTimeout time.Duration
}

// DefaultGrainIdleTimeout is Config.GrainIdleTimeout's default.
const DefaultGrainIdleTimeout = 2 * time.Minute

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
		if c.TLS == nil && !names.LoopbackHost(host) {
			bad("Address %q is not loopback and TLS is not set: the remote carries claims, so secure it with TLS", c.Address)
		}
	}
	if c.Advertise != "" {
		if host, port, err := net.SplitHostPort(c.Advertise); err != nil || host == "" || port == "0" {
			bad("Advertise %q is not host:port with a port: give the address the other members dial, say 203.0.113.5:7946", c.Advertise)
		} else if c.TLS == nil && !names.LoopbackHost(host) {
			bad("Advertise %q is not loopback and TLS is not set: the remote carries claims, so secure it with TLS", c.Advertise)
		}
	}
	if c.TLS != nil && (c.TLS.Server == nil || c.TLS.Client == nil) {
		bad("TLS needs both Server and Client configs")
	}
	if c.GrainIdleTimeout < 0 || c.GrainIdleTimeout > 0 && c.GrainIdleTimeout < time.Millisecond {
		bad("GrainIdleTimeout is %v: give at least 1ms, or 0 for the default %v", c.GrainIdleTimeout, DefaultGrainIdleTimeout)
	}
	if c.Fleet.LeaseTTL%time.Second != 0 {
		bad("Fleet.LeaseTTL is %v: give whole seconds (etcd leases count seconds)", c.Fleet.LeaseTTL)
	}
	return errors.Join(problems...)
}

// withDefaults fills the defaults of the fields the member reads itself;
// fleet.Open fills the rest of Fleet's.
func (c Config) withDefaults() Config {
	c.ClusterName = cmp.Or(c.ClusterName, DefaultClusterName)
	c.GrainIdleTimeout = cmp.Or(c.GrainIdleTimeout, DefaultGrainIdleTimeout)
	c.Fleet.Prefix = cmp.Or(c.Fleet.Prefix, fleet.DefaultPrefix)
	c.Fleet.LeaseTTL = cmp.Or(c.Fleet.LeaseTTL, fleet.DefaultLeaseTTL)
	c.Fleet.RequestTimeout = cmp.Or(c.Fleet.RequestTimeout, fleet.DefaultRequestTimeout)
	if c.Fleet.Logger == nil {
		c.Fleet.Logger = hclog.NewNullLogger()
	}
	return c
}

// Member is this node's place in the protoactor cluster: an actor system
// with its remote, the cluster's gossip and identity lookup (disthash), the
// membership provider on etcd, the fleet.Store its grains and Router use,
// and the volume grains that the rendezvous hash gives it.
//
// When etcd expires the member's lease, protoactor has blocked its ID for
// good, so the member joins again as a new incarnation: a new actor system
// (a new ID), remote, cluster and provider, on the same address and store.
type Member struct {
	cfg    Config
	log    hclog.Logger
	router *Router
	// current is the member's incarnation once it has started, nil while
	// a rejoin starts the next one: protoactor's cluster takes requests
	// only once StartMember has set its identity lookup up. latest is the
	// incarnation started last, current or retired, for the member's ID
	// and address while it joins again.
	current, latest atomic.Pointer[incarnation]
	// rejoining guards stopping; rejoins counts the rejoins running,
	// which quit ends.
	rejoining sync.Mutex
	stopping  bool
	rejoins   sync.WaitGroup
	quit      context.Context
	cancel    context.CancelFunc
	// store is set once etcd answers, before the member registers, so
	// before any grain can start; grains read it from their goroutines.
	store atomic.Pointer[fleet.Store]
	// topology is the last member set protoactor published: MemberList
	// reads its own set without a lock, so the member keeps a copy.
	topology atomic.Pointer[[]*cluster.Member]
	// changed is closed, and replaced, at each change of the topology.
	changed atomic.Pointer[chan struct{}]
	// reach is when each other member last answered a ping (reach.go);
	// probing counts the prober, which quit ends.
	reach *reach
	// controllers serves other members' controller operations (controller.go).
	controllers controllers
	probing     sync.WaitGroup
	stopped     sync.Once
	stopErr     error
}

// incarnation is one join of the member to the cluster, under the ID of
// its actor system.
type incarnation struct {
	system   *actor.ActorSystem
	cluster  *cluster.Cluster
	provider *provider
	// peers are the addresses of every other member ever in the
	// topology, whose connections stop closes.
	peers sync.Map
	// retired is set when a rejoin replaces the incarnation: its
	// topology is no longer the member's.
	retired atomic.Bool
	// stopping is set once the incarnation stops: protoactor's complaints
	// about the parts being stopped are not the operator's news.
	stopping *atomic.Bool
	stopOnce sync.Once
	stopErr  error
}

// Start opens the fleet's state in etcd and joins the cluster. It returns
// when the member is registered in etcd and sees the members registered
// before it; protoactor's start-up takes about a second more than that.
// A bad Config is ErrInvalidConfig (or model.ErrInvalid from
// fleet.Open); an etcd that does not answer is model.ErrFleetUnavailable.
// With TLS, the member first shakes hands with up to five members already
// there, and does not join (ErrPeerTLS) when some refuse its certificate,
// or it theirs, and none accepts it: it would hold volume grains nobody
// could reach.
//
// Start the member before any other gRPC of the process where the race
// detector runs: protoactor's remote sets gRPC's global logger, without a
// lock, when it starts.
func Start(cfg Config) (*Member, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	m := &Member{cfg: cfg, log: cfg.Fleet.Logger.Named("member"), reach: &reach{heard: map[string]time.Time{}}}
	m.quit, m.cancel = context.WithCancel(context.Background())
	m.router = newRouter(m)
	m.topology.Store(&[]*cluster.Member{})
	m.changed.Store(new(make(chan struct{})))
	inc := m.newIncarnation()
	inc.provider.joined = func(*clientv3.Client) error { return m.openStore(inc.system.Address()) }
	if err := inc.start(cfg.Address); err != nil {
		_ = inc.stop()
		_ = m.stopAll()
		return nil, err
	}
	m.started(inc)
	m.probing.Add(1)
	go func() {
		defer m.probing.Done()
		m.probe(m.quit)
	}()
	m.log.Info("joined the cluster", "cluster", cfg.ClusterName, "member", inc.system.ID, "address", inc.system.Address())
	return m, nil
}

// newIncarnation builds an actor system, its remote and cluster, and a
// provider, all unstarted.
func (m *Member) newIncarnation() *incarnation {
	cfg, log := m.cfg, m.log
	host, portText, _ := net.SplitHostPort(cfg.Address)
	port, _ := strconv.Atoi(portText)

	p := newProvider(cfg.Fleet.ClientConfig(), cfg.Fleet.Prefix, cfg.ClusterName, cfg.Fleet.LeaseTTL, cfg.Fleet.RequestTimeout, log)
	stopping := &atomic.Bool{}
	system := actors.NewSystem(nil, actor.WithLoggerFactory(quietLogger(log, p.left, stopping)))
	p.lost = m.rejoin
	p.stopTimeout = func() time.Duration {
		if s := m.store.Load(); s != nil {
			return s.CallTimeout()
		}
		return cfg.Fleet.RequestTimeout
	}
	if cfg.TLS != nil {
		p.check = tlsPeerCheck(cfg.TLS.Client, cfg.Fleet.RequestTimeout)
	}
	// protoactor's endpoint queues default to a million entries each,
	// allocated up front: hundreds of MiB per member.
	options := remoteOptions(cfg.TLS, log)
	if cfg.Advertise != "" {
		options = append(options, remote.WithAdvertisedHost(cfg.Advertise))
	}
	rc := remote.Configure(host, port, append(options,
		remote.WithEndpointWriterQueueSize(remoteQueueSize), remote.WithEndpointManagerQueueSize(remoteQueueSize))...)
	// protoactor's endpoint writer dials a peer up to MaxRetryCount times
	// and leaks the gRPC connection of every failed attempt but the last,
	// which then redials forever: a dead peer gets one attempt, whose
	// connection is closed with its writer.
	rc.MaxRetryCount = 1
	inc := &incarnation{system: system, provider: p, stopping: stopping}
	// A grain gives the Store twice its request timeout, so that an etcd
	// that does not answer fails the Store's own call first, as
	// model.ErrFleetUnavailable, rather than the grain's deadline.
	kind := cluster.NewKind(VolumeKind, countActivations(volumeProps(m.fleetStore, cfg.Fleet.Keyring, system.ID, 2*cfg.Fleet.RequestTimeout, cfg.GrainIdleTimeout, log), cfg.Fleet.Metrics))
	// Membership is etcd's: protoactor's gossip must not exclude a member
	// whose heartbeats it missed (on a loaded host it does, for good, while
	// the member's lease is alive), so its expiry is an hour; and nothing
	// of ours reads the gossip, so it runs every second, not every 300 ms.
	cc := cluster.Configure(cfg.ClusterName, p, disthash.New(), rc,
		cluster.WithKinds(kind),
		cluster.WithRequestTimeout(cfg.Fleet.RequestTimeout),
		cluster.WithHeartbeatExpiration(time.Hour),
	)
	cc.GossipInterval = time.Second
	inc.cluster = cluster.New(system, cc)
	p.subscribe = func() { system.EventStream.Subscribe(inc.onTopology(m)) }
	return inc
}

// onTopology is the incarnation's handler of protoactor's topology
// events: it keeps the peers' addresses, and, unless the incarnation is
// retired, publishes the topology to the member and wakes the Router's
// requests waiting for a change. It must run after disthash's own
// handler, which changes the rendezvous table the Router's next request
// reads (see provider.subscribe).
func (inc *incarnation) onTopology(m *Member) func(any) {
	system := inc.system
	return func(ev any) {
		if t, ok := ev.(*cluster.ClusterTopology); ok {
			members := slices.Clone(t.Members)
			for _, mem := range members {
				if mem.Id != system.ID {
					inc.peers.Store(mem.Address(), true)
				}
			}
			if inc.retired.Load() {
				return
			}
			m.topology.Store(&members)
			close(*m.changed.Swap(new(make(chan struct{}))))
		}
	}
}

// start joins the cluster: it registers the incarnation in etcd.
func (inc *incarnation) start(address string) (err error) {
	defer func() {
		// protoactor panics when the remote cannot listen or the provider
		// fails to start.
		if r := recover(); r != nil {
			err = recovered(address, r)
		}
	}()
	inc.cluster.StartMember()
	return nil
}

// rejoin, which the provider calls when etcd expired the member's lease,
// retires the member's incarnation and joins again under a new ID,
// retrying until it is in or the member stops. The old incarnation stops
// first: the new one listens on the same address. Its grains are gone;
// the next request of each activates it again, from etcd. (The new remote
// sets gRPC's global logger again, while the etcd clients run: protoactor
// leaves no way around that race.)
func (m *Member) rejoin() {
	m.rejoining.Lock()
	defer m.rejoining.Unlock()
	if m.stopping {
		return
	}
	m.rejoins.Add(1)
	go func() {
		defer m.rejoins.Done()
		old := m.current.Swap(nil)
		if old == nil { // a rejoin runs already
			return
		}
		old.retired.Store(true)
		_ = old.stop()
		for m.quit.Err() == nil {
			inc := m.newIncarnation()
			err := inc.start(m.cfg.Address)
			if err == nil {
				m.started(inc)
				m.log.Info("joined the cluster again", "member", inc.system.ID, "was", old.system.ID, "address", inc.system.Address())
				return
			}
			m.log.Warn("cannot join the cluster again; retrying", "error", err)
			inc.retired.Store(true)
			_ = inc.stop()
			if !sleep(m.quit, inc.provider.retryDelay()) {
				return
			}
		}
	}()
}

// started makes inc, which has started, the member's incarnation, and
// wakes the Router's requests that wait for one.
func (m *Member) started(inc *incarnation) {
	if err := m.spawnPing(inc); err != nil {
		m.log.Warn("cannot start the member's ping actor: the others count it unreachable", "error", err)
	}
	if err := m.spawnControllers(inc); err != nil {
		m.log.Warn("cannot start the member's controller actor: the others cannot run controller operations here", "error", err)
	}
	m.latest.Store(inc)
	m.current.Store(inc)
	close(*m.changed.Swap(new(make(chan struct{}))))
}

// recovered is the error of a panic of protoactor's start-up: the error it
// panicked with is kept for errors.Is.
func recovered(address string, r any) error {
	if err, ok := r.(error); ok {
		return fmt.Errorf("join the cluster at %s: %w", address, err)
	}
	return fmt.Errorf("join the cluster at %s: %v", address, r)
}

// openStore opens the fleet.Store once the provider reaches etcd; the
// store's liveness record names address, where the member listens.
func (m *Member) openStore(address string) error {
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.Fleet.RequestTimeout)
	defer cancel()
	cfg := m.cfg.Fleet
	cfg.Address = address
	s, err := fleet.Open(ctx, cfg)
	if err != nil {
		return err
	}
	m.store.Store(s)
	return nil
}

// fleetStore is the member's fleet.Store, as the grains see it: nil (not
// a nil *fleet.Store in an interface) until the member has reached etcd.
func (m *Member) fleetStore() model.Fleet {
	if s := m.store.Load(); s != nil {
		return s
	}
	return nil
}

func remoteOptions(t *RemoteTLS, log hclog.Logger) []remote.ConfigOption {
	if t == nil {
		return []remote.ConfigOption{remote.WithDialOptions(grpc.WithTransportCredentials(insecure.NewCredentials()))}
	}
	server := t.Server.Clone()
	server.VerifyConnection = membersOnly(server.VerifyConnection, log)
	return []remote.ConfigOption{
		remote.WithServerOptions(grpc.Creds(credentials.NewTLS(server))),
		remote.WithDialOptions(grpc.WithTransportCredentials(credentials.NewTLS(t.Client))),
	}
}

// ID is the member's ID in the cluster (its actor system's ID); a new one
// after each rejoin, once the new incarnation has started.
func (m *Member) ID() string { return m.latest.Load().system.ID }

// Address is the address the member's remote listens on.
func (m *Member) Address() string { return m.latest.Load().system.Address() }

// Cluster is the protoactor cluster, to send grain requests with; nil
// while the member joins the cluster again.
func (m *Member) Cluster() *cluster.Cluster {
	if inc := m.current.Load(); inc != nil {
		return inc.cluster
	}
	return nil
}

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

// Grains is how many volume grains run on this member now.
func (m *Member) Grains() int {
	c := m.Cluster()
	if c == nil {
		return 0
	}
	if kind := c.GetClusterKind(VolumeKind); kind != nil {
		return int(kind.Count())
	}
	return 0
}

// Store is the member's fleet.Store (for fleet.StartGC, say).
func (m *Member) Store() *fleet.Store { return m.store.Load() }

// topologyChanged is closed at the next change of the topology.
func (m *Member) topologyChanged() <-chan struct{} { return *m.changed.Load() }

// Router is the member's model.Fleet.
func (m *Member) Router() *Router { return m.router }

// Stop leaves the cluster: the member's key goes from etcd at once, its
// grains stop (the next request of each activates it on another member),
// its fleet.Store closes (this node leaves the health counts; its claims
// stay), and its goroutines end. It skips protoactor's fixed two-second
// wait for a graceful leave: the grains keep nothing that etcd does not
// hold. It waits for the Router's requests still out, which a topology
// change can leave running until their timeout (three request timeouts at
// most). Stopping again does nothing and returns the first Stop's error.
func (m *Member) Stop() error {
	m.stopped.Do(func() {
		m.stopErr = m.stopAll()
		m.log.Info("left the cluster", "member", m.ID())
	})
	return m.stopErr
}

// stopAll ends a rejoin under way, stops the incarnation (revoking the
// member's lease), and the store, and waits for the Router's requests
// still out (each ends within its timeout). It is safe after a start that
// failed half-way.
func (m *Member) stopAll() error {
	m.endRejoins()
	var err error
	if inc := m.latest.Load(); inc != nil {
		err = inc.stop()
	}
	if s := m.store.Load(); s != nil {
		err = errors.Join(err, s.Close())
	}
	m.router.sending.Wait()
	m.controllers.running.Wait()
	return err
}

// endRejoins ends the rejoins and keeps new ones from starting.
func (m *Member) endRejoins() {
	m.rejoining.Lock()
	m.stopping = true
	m.rejoining.Unlock()
	m.cancel()
	m.rejoins.Wait()
	m.probing.Wait()
}

// stop stops the provider (revoking the lease) and protoactor's parts,
// once.
func (inc *incarnation) stop() error {
	inc.stopOnce.Do(func() {
		inc.stopping.Store(true)
		inc.stopErr = inc.provider.Shutdown(true)
		inc.stopCluster()
	})
	return inc.stopErr
}

// stopCluster stops what protoactor started: the grains and the placement
// actor, the gossip, the connections to the other members, the remote's
// server, and the actor system.
//
// The connections close as when their members leave (an
// EndpointTerminatedEvent for each member ever seen, since one that left
// may still have a connection), and the server stops hard: protoactor's
// graceful remote shutdown races with a member leaving at the same moment
// (endpointManager.stop clears the connection map that the handler of a
// lost connection reads, without a lock).
func (inc *incarnation) stopCluster() {
	c := inc.cluster
	if c.IdentityLookup != nil {
		c.IdentityLookup.Shutdown()
	}
	if c.Gossip != nil {
		c.Gossip.Shutdown()
	}
	// A remote that failed to listen has no server to stop: its actor
	// system kept protoactor's placeholder address.
	if c.Remote != nil && inc.system.Address() != unstartedAddress {
		inc.peers.Range(func(address, _ any) bool {
			inc.system.EventStream.Publish(&remote.EndpointTerminatedEvent{Address: address.(string)})
			return true
		})
		c.Remote.Shutdown(false)
	}
	inc.system.Shutdown()
}
