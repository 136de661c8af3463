package fleet

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/messages"
)

// ErrNodeIDTaken is returned by Open when another agent holds this node
// ID in the fleet: its liveness key is live under its lease, and its
// identity is not this agent's. Two agents with one node ID would each
// believe the other's claims its own.
var ErrNodeIDTaken = errclass.New(errclass.Conflict, "node ID held by another agent")

// A node's liveness key holds a FleetNodeRecord: the identity of the agent
// that holds the node ID, where it listens and since when. The identity
// is a SHA-256 of Config.Identity, a secret the agent keeps in its data
// dir. Putting the key is a transaction that succeeds only when the key
// is absent or holds this agent's own identity, which an earlier
// incarnation killed before its lease expired left behind. So a second
// agent with a live node ID is refused at Open, and an agent whose lease
// etcd lost cannot take the ID back from an agent that took it meanwhile.
// An agent that finds its key holding another identity (an operator's
// write, a restore of etcd) loses its standing at once (see Standing).

// identityHash is the identity a liveness record stores for secret.
func identityHash(secret string) []byte {
	sum := sha256.Sum256([]byte("plugvisor node identity\x00" + secret))
	return sum[:]
}

// NewIdentity returns a new random identity secret, for Config.Identity.
func NewIdentity() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newIncarnation is a random tag of one start of an agent.
func newIncarnation() []byte {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return b
}

// livenessRecord is this agent's liveness record, started now.
func (s *Store) livenessRecord() *messages.FleetNodeRecord {
	host, _ := os.Hostname()
	return &messages.FleetNodeRecord{
		Identity: identityHash(s.cfg.Identity), StartedUnixNano: time.Now().UnixNano(),
		Address: s.cfg.Address, Hostname: host, Pid: int64(os.Getpid()), Incarnation: s.incarnation,
	}
}

// holder is what a liveness key says of the agent holding a node ID.
type holder struct {
	rec   *messages.FleetNodeRecord // nil: a value of an older agent, or no record
	lease int64
}

// decodeHolder reads the liveness key kv. A value that is no record (an
// agent of an earlier version wrote the time it joined) names an agent of
// unknown identity.
func (s *Store) decodeHolder(kv *mvccpb.KeyValue) holder {
	var rec messages.FleetNodeRecord
	if s.codec.decode(string(kv.Key), kv.Value, &rec) != nil {
		return holder{lease: kv.Lease}
	}
	return holder{rec: &rec, lease: kv.Lease}
}

// joined is when the holder put its liveness key, zero when unknown.
func (h holder) joined(value []byte) time.Time {
	if h.rec != nil {
		return time.Unix(0, h.rec.GetStartedUnixNano()).UTC()
	}
	t, _ := time.Parse(time.RFC3339Nano, string(value))
	return t
}

// ours reports whether the holder is this agent, in this or an earlier
// incarnation.
func (s *Store) ours(h holder) bool {
	return h.rec != nil && subtle.ConstantTimeCompare(h.rec.GetIdentity(), s.identity) == 1
}

// this reports whether the holder is this incarnation of this agent: a
// later start of the same identity (a copy of its data dir) is not.
func (s *Store) this(h holder) bool {
	return s.ours(h) && subtle.ConstantTimeCompare(h.rec.GetIncarnation(), s.incarnation) == 1
}

// describe names the holder for an operator.
func (h holder) describe(value []byte) string {
	if h.rec == nil {
		return fmt.Sprintf("an agent of an earlier version or an operator's write (value %q, lease %x)", truncate(string(value), 64), h.lease)
	}
	var parts []string
	if a := h.rec.GetAddress(); a != "" {
		parts = append(parts, "member address "+a)
	}
	if host := h.rec.GetHostname(); host != "" {
		parts = append(parts, fmt.Sprintf("process %d on host %s", h.rec.GetPid(), host))
	}
	parts = append(parts, "started "+time.Unix(0, h.rec.GetStartedUnixNano()).UTC().Format(time.RFC3339), fmt.Sprintf("lease %x", h.lease))
	return "the agent at " + strings.Join(parts, ", ")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// takenError is ErrNodeIDTaken for the holder of kv.
func (s *Store) takenError(kv *mvccpb.KeyValue, ttl int64) error {
	h := s.decodeHolder(kv)
	return fmt.Errorf("%w: node ID %q is held by %s; its lease has %ds left. "+
		"Stop that agent, or give this one another -node-id; if that agent is gone, start this one again once its lease has run out",
		ErrNodeIDTaken, s.cfg.NodeID, h.describe(kv.Value), max(ttl, 0))
}

// putLiveness puts the liveness key under lease, with the ops given, in one
// transaction that holds only while the key is absent or this agent's
// own. When another agent holds it, the error matches ErrNodeIDTaken and
// nothing is written. An earlier incarnation's lease that held the key is
// revoked, best effort, once the key is this lease's.
func (s *Store) putLiveness(ctx context.Context, lease clientv3.LeaseID, ops []clientv3.Op) error {
	key := s.keys.node(s.cfg.NodeID)
	value, err := s.codec.encode(key, s.livenessRecord())
	if err != nil {
		return err
	}
	ops = append([]clientv3.Op{clientv3.OpPut(key, value, clientv3.WithLease(lease))}, ops...)
	resp, err := s.client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(ops...).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return etcdErr(err)
	}
	if resp.Succeeded {
		return nil
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 { // gone in between: try again from the start
		return s.putLiveness(ctx, lease, ops[1:])
	}
	kv := kvs[0]
	if !s.ours(s.decodeHolder(kv)) {
		ttl, err := s.client.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
		if err != nil {
			return etcdErr(err)
		}
		return s.takenError(kv, ttl.TTL)
	}
	resp, err = s.client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).Then(ops...).Commit()
	if err != nil {
		return etcdErr(err)
	}
	if !resp.Succeeded {
		return s.putLiveness(ctx, lease, ops[1:])
	}
	if old := clientv3.LeaseID(kv.Lease); old != 0 && old != lease {
		s.log.Info("took over the node ID from an earlier incarnation of this agent", "node", s.cfg.NodeID, "lease", fmt.Sprintf("%x", old))
		_, _ = s.client.Revoke(ctx, old)
	}
	return nil
}

// identityLoss is why this agent no longer holds its node ID, once its
// liveness key was found holding another agent's identity; nil while it
// holds it.
type identityLoss struct{ reason atomic.Pointer[string] }

// lose notes why the node ID is lost; it reports whether that is news.
func (l *identityLoss) lose(reason string) bool {
	return l.reason.Swap(&reason) == nil
}

// regain notes that the node ID is this agent's again.
func (l *identityLoss) regain() bool { return l.reason.Swap(nil) != nil }

// lost is why the node ID is lost, or "".
func (l *identityLoss) lost() string {
	if p := l.reason.Load(); p != nil {
		return *p
	}
	return ""
}

// IdentityLost is why this agent no longer holds its node ID in the fleet
// (another agent's identity took its liveness key), or "" while it does.
// While it is set, Standing is lost: the agent fences its writers.
func (s *Store) IdentityLost() string { return s.lost.lost() }

// noteHolder checks the liveness key as a watch saw it (kv nil: deleted).
// Another agent's identity there loses the node ID at once; this agent's
// own regains it; a deleted key is put again (reassert), as the fleet
// counts the node down without it.
func (s *Store) noteHolder(kv *mvccpb.KeyValue) {
	if kv == nil {
		s.lease.reassert()
		return
	}
	h := s.decodeHolder(kv)
	if s.this(h) {
		if s.lost.regain() {
			s.log.Info("this agent holds its node ID again", "node", s.cfg.NodeID)
		}
		return
	}
	reason := fmt.Sprintf("node ID %q is now held by %s: this agent fenced its writers and takes no new claim. "+
		"Two agents must not share a node ID (nor a copy of one data dir): stop one of them", s.cfg.NodeID, h.describe(kv.Value))
	if s.lost.lose(reason) {
		s.log.Error("this agent lost its node ID to another", "node", s.cfg.NodeID, "why", reason)
	}
}
