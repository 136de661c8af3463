package member

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/errclass"
)

// provider is protoactor's cluster membership kept in etcd: each member
// puts its cluster.Member record at <prefix>members/<cluster>/<member ID>
// under a lease of its own TTL, and watches the prefix to hand every change
// of the member set to the cluster's MemberList.
//
// The contract:
//   - A member is in the topology while its key exists: from its StartMember
//     until its Shutdown, or until its lease expires (at most the TTL after
//     it stops renewing, as when its process is killed).
//   - Shutdown(graceful) revokes the lease, so the others see the member
//     leave at once, whatever graceful says; crash (tests only) stops
//     renewing without revoking, as a killed process does.
//   - When etcd cannot be reached the topology stays as it was; the lease is
//     granted again and the key put again when etcd answers, and the watch
//     starts again from a fresh listing.
//   - The provider dials etcd in StartMember, after protoactor started the
//     remote: protoactor's remote sets gRPC's global logger when it starts,
//     unsynchronised, so no gRPC of the member may run before it.
//   - Shutdown waits for the provider's goroutines and closes its client.
type provider struct {
	etcd    clientv3.Config
	prefix  string // <prefix>members/<cluster>/
	ttl     time.Duration
	timeout time.Duration
	log     hclog.Logger
	// joined runs once the etcd client is up, before the member registers:
	// what it starts is in place before another member can route to this one.
	joined func(*clientv3.Client) error
	// lost runs, once, when etcd says the member's lease expired: the
	// member must join again under a new ID (see keepAlive).
	lost func()
	// check, when set (the remote runs TLS), checks the members already
	// there before this one registers (see checkPeers).
	check peerCheck
	// stopTimeout, when set, bounds the revocation of the lease at
	// Shutdown (the fleet.Store's CallTimeout); else timeout does.
	stopTimeout func() time.Duration
	// subscribe, when set, subscribes the member to the topology events.
	// StartMember calls it before the first topology: protoactor has
	// set its identity lookup up by then, and the EventStream calls its
	// handlers in the order they subscribed, so the member hears of a
	// change after disthash changed its rendezvous table. Subscribed
	// earlier, a request the change woke could still be routed to the
	// member that left, and wait out its pause.
	subscribe func()

	client *clientv3.Client
	// asked is client, for left, once StartMember made it: protoactor's
	// goroutines log while the provider starts and stops.
	asked atomic.Pointer[clientv3.Client]

	cluster *cluster.Cluster
	key     string
	value   []byte

	cancel context.CancelFunc
	done   sync.WaitGroup

	// lease is the lease of the member's key; the keep-alive goroutine is
	// its only writer after StartMember, Shutdown its reader after the
	// goroutine ended.
	lease clientv3.LeaseID
}

var _ cluster.ClusterProvider = (*provider)(nil)

// errClientMode says that the provider only runs members.
var errClientMode = errclass.New(errclass.Unsupported, "the etcd provider runs members only, not cluster clients")

func newProvider(etcd clientv3.Config, prefix, clusterName string, ttl, timeout time.Duration, log hclog.Logger) *provider {
	return &provider{
		etcd:    etcd,
		prefix:  prefix + "members/" + clusterName + "/",
		ttl:     ttl,
		timeout: timeout,
		log:     log,
	}
}

// StartMember registers the member and starts the keep-alive and the watch.
// The topology holds every registered member, this one included, when it
// returns.
func (p *provider) StartMember(c *cluster.Cluster) error {
	host, port, err := c.ActorSystem.GetHostPort()
	if err != nil {
		return fmt.Errorf("the member's address %q: %w", c.ActorSystem.Address(), err)
	}
	self := &cluster.Member{Id: c.ActorSystem.ID, Host: host, Port: int32(port), Kinds: c.GetClusterKinds()}
	p.value, err = proto.Marshal(self)
	if err != nil {
		return fmt.Errorf("encode the member record: %w", err)
	}
	p.cluster, p.key = c, p.prefix+self.Id
	if p.subscribe != nil {
		p.subscribe()
	}
	if p.client, err = clientv3.New(p.etcd); err != nil {
		return fmt.Errorf("etcd client for %v: %w", p.etcd.Endpoints, err)
	}
	p.asked.Store(p.client)
	if p.joined != nil {
		if err := p.joined(p.client); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	if p.check != nil {
		others, _, err := p.list(ctx)
		if err != nil {
			return err
		}
		if err := checkPeers(ctx, p.check, self.Id, others); err != nil {
			return err
		}
	}
	if err := p.register(ctx); err != nil {
		return err
	}
	members, rev, err := p.list(ctx)
	if err != nil {
		return err
	}
	c.MemberList.UpdateClusterTopology(members)
	p.done.Add(2)
	go p.keepAlive(ctx)
	go p.watch(ctx, members, rev)
	return nil
}

// StartClient is refused: every plugvisor agent is a member.
func (p *provider) StartClient(*cluster.Cluster) error { return errClientMode }

// Shutdown stops renewing and watching, revokes the lease so that the
// member's key goes at once, and closes the etcd client. It is safe after
// a failed StartMember.
func (p *provider) Shutdown(bool) error {
	p.stop()
	var err error
	if rerr := p.revoke(); rerr != nil {
		p.log.Warn("could not revoke the member's lease: the others see it leave once the lease expires", "error", rerr)
	}
	if p.client != nil {
		if cerr := p.client.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close the etcd client: %w", cerr)
		}
	}
	return err
}

// abandon stops renewing and watching and closes the client without
// revoking the lease: the member's key stays until the lease expires, as
// after a kill -9 (or a start that failed half-way).
func (p *provider) abandon() {
	p.stop()
	if p.client != nil {
		_ = p.client.Close()
	}
}

func (p *provider) stop() {
	if p.cancel != nil {
		p.cancel()
	}
	p.done.Wait()
}

func (p *provider) revoke() error {
	if p.lease == clientv3.NoLease {
		return nil
	}
	timeout := p.timeout
	if p.stopTimeout != nil {
		timeout = p.stopTimeout()
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err := p.client.Revoke(ctx, p.lease)
	p.lease = clientv3.NoLease
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return nil // it expired (during an outage): the key went with it
	}
	if err != nil {
		return fmt.Errorf("revoke the lease of %s (it expires by itself within %v): %w", p.key, p.ttl, err)
	}
	return nil
}

// register grants a lease and puts the member's key under it.
func (p *provider) register(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	lease, err := p.client.Grant(ctx, int64(p.ttl/time.Second))
	if err != nil {
		return fmt.Errorf("grant a lease in etcd %v: %w", p.client.Endpoints(), err)
	}
	p.lease = lease.ID
	if _, err := p.client.Put(ctx, p.key, string(p.value), clientv3.WithLease(lease.ID)); err != nil {
		return fmt.Errorf("register %s in etcd %v: %w", p.key, p.client.Endpoints(), err)
	}
	return nil
}

// keepAlive renews the lease until ctx ends. The client stops renewing
// when etcd has not answered for a TTL; the lease itself may well live on
// (etcd extends every lease when it restarts), so the member keeps it when
// etcd still has it. When etcd says the lease expired, the member's key
// went with it, and protoactor blocks, for good, a member whose key it once
// saw deleted (every member, this one included, and gossip spreads the
// block): registering the same ID again would leave the member out of
// every topology, so keepAlive hands the loss to lost and ends.
func (p *provider) keepAlive(ctx context.Context) {
	defer p.done.Done()
	for ctx.Err() == nil {
		if ch, err := p.client.KeepAlive(ctx, p.lease); err == nil {
			for range ch {
				// Each answer is a renewal; the channel closes when the
				// lease expired or etcd stopped answering.
			}
		}
		for ctx.Err() == nil {
			alive, err := p.leaseAlive(ctx)
			if err == nil && !alive {
				p.log.Warn("the member's lease expired; joining the cluster again under a new member ID", "key", p.key)
				p.lost()
				return
			}
			if err == nil {
				break
			}
			p.log.Warn("cannot renew the member's lease", "key", p.key, "error", err)
			if !sleep(ctx, p.retryDelay()) {
				return
			}
		}
	}
}

// leaseAlive asks etcd whether the member's lease still lives.
func (p *provider) leaseAlive(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	resp, err := p.client.TimeToLive(ctx, p.lease)
	if err != nil {
		return false, fmt.Errorf("ask etcd %v about the lease of %s: %w", p.client.Endpoints(), p.key, err)
	}
	return resp.TTL > 0, nil
}

// watch hands each change of the member set to the MemberList, from
// revision rev on; after a failed watch it lists again.
func (p *provider) watch(ctx context.Context, members []*cluster.Member, rev int64) {
	defer p.done.Done()
	current := make(map[string]*cluster.Member, len(members))
	for _, m := range members {
		current[p.prefix+m.Id] = m
	}
	for ctx.Err() == nil {
		for resp := range p.client.Watch(clientv3.WithRequireLeader(ctx), p.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
			if resp.Err() != nil {
				break
			}
			p.apply(current, resp.Events)
			rev = resp.Header.Revision
		}
		if !sleep(ctx, p.retryDelay()) {
			return
		}
		listed, r, err := p.list(ctx)
		if err != nil {
			p.log.Warn("cannot list the cluster's members; the topology stays as it was", "error", err)
			continue
		}
		clear(current)
		for _, m := range listed {
			current[p.prefix+m.Id] = m
		}
		rev = r
		p.cluster.MemberList.UpdateClusterTopology(listed)
	}
}

// apply changes current by events and hands the result to the MemberList.
func (p *provider) apply(current map[string]*cluster.Member, events []*clientv3.Event) {
	for _, ev := range events {
		key := string(ev.Kv.Key)
		if ev.Type == clientv3.EventTypeDelete {
			delete(current, key)
			continue
		}
		m, err := decodeMember(ev.Kv.Value)
		if err != nil {
			p.log.Error("ignoring a bad member record", "key", key, "error", err)
			continue
		}
		current[key] = m
	}
	all := make([]*cluster.Member, 0, len(current))
	for _, m := range current {
		all = append(all, m)
	}
	p.cluster.MemberList.UpdateClusterTopology(all)
}

// list reads every member record and the revision it was read at.
func (p *provider) list(ctx context.Context) ([]*cluster.Member, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	return p.listWith(ctx, p.client)
}

// listWith is list through client, within ctx.
func (p *provider) listWith(ctx context.Context, client *clientv3.Client) ([]*cluster.Member, int64, error) {
	resp, err := client.Get(ctx, p.prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("list the members in etcd %v: %w", client.Endpoints(), err)
	}
	members := make([]*cluster.Member, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		m, err := decodeMember(kv.Value)
		if err != nil {
			p.log.Error("ignoring a bad member record", "key", string(kv.Key), "error", err)
			continue
		}
		members = append(members, m)
	}
	return members, resp.Header.Revision, nil
}

// left reports whether etcd holds no member at address: the member there
// left the fleet (its key went with its lease, which a member that stops
// revokes before its remote stops). It is false when etcd does not
// answer within leftWait, or before StartMember.
func (p *provider) left(address string) bool {
	client := p.asked.Load()
	if client == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(leftWait, p.timeout))
	defer cancel()
	members, _, err := p.listWith(ctx, client)
	if err != nil {
		return false
	}
	return !slices.ContainsFunc(members, func(m *cluster.Member) bool { return m.Address() == address })
}

// leftWait bounds left's read of etcd: it runs in protoactor's log
// handler, on the goroutine of the actor that logged (an endpoint
// writer's), which it holds up meanwhile.
const leftWait = 200 * time.Millisecond

func (p *provider) retryDelay() time.Duration { return p.ttl / 4 }

func decodeMember(b []byte) (*cluster.Member, error) {
	m := &cluster.Member{}
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("decode a member record: %w", err)
	}
	if m.GetId() == "" || m.GetHost() == "" {
		return nil, errors.New("a member record has no ID or host")
	}
	return m, nil
}

// sleep waits d or until ctx ends, and reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
