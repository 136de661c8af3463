package fleet

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/errclass"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// Store is the cluster-wide catalog in etcd, as seen from one node. Its
// methods are safe for concurrent use. It implements model.Fleet.
type Store struct {
	cfg    Config
	log    hclog.Logger
	client *clientv3.Client
	keys   keys

	// lease keeps this node's lease alive; see nodes.go.
	lease *lease
	// identity is the hash of Config.Identity that this agent's liveness
	// record holds, and lost why another agent holds the node ID now
	// (identity.go).
	identity, incarnation []byte
	lost                  identityLoss
	// codec encodes and decodes the records (record.go, keyring.go).
	codec codec
	// watch is the node's watch while one runs (WatchNode).
	watch atomic.Pointer[nodeWatch]
	// hurry is set once the agent stops (Hurry).
	hurry atomic.Bool
	// lastPlugin is the plugin of the last volume read: readVolume reads
	// its fingerprints with the next record, in one round trip, as most
	// fleets run one plugin or a few. A wrong guess costs one more.
	lastPlugin atomic.Pointer[string]
	// reach is whether etcd answered the latest call; see metrics.go.
	reach reachability

	closeOnce sync.Once
	closeErr  error
}

var (
	_ model.Fleet       = (*Store)(nil)
	_ model.BatchFleet  = (*Store)(nil)
	_ model.ModifyFleet = (*Store)(nil)
)

// Open connects to etcd, grants this node's lease and puts its liveness
// key under it, and starts keeping the lease alive. It fails with
// model.ErrFleetUnavailable when etcd does not answer within the request
// timeout, and with model.ErrInvalid on a bad config. Close
// releases what it started.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Store{cfg: cfg, log: cfg.Logger, keys: keys{prefix: cfg.Prefix}, identity: identityHash(cfg.Identity), incarnation: newIncarnation(),
		codec: codec{keyring: cfg.Keyring, acceptPlain: cfg.AcceptUnsealed}}
	client, err := clientv3.New(s.clientConfig())
	if err != nil {
		if denied := etcdErr(err); errors.Is(denied, ErrEtcdDenied) {
			return nil, fmt.Errorf("connect to etcd at %s: %w", strings.Join(cfg.Endpoints, ","), denied)
		}
		return nil, model.Refusef(model.ErrFleetUnavailable, "connect to etcd at %s: %v", strings.Join(cfg.Endpoints, ","), err)
	}
	s.client = client
	if err := s.call(ctx, "build the volume indexes", s.buildIndexes); err != nil {
		_ = client.Close()
		return nil, err
	}
	if s.lease, err = startLease(ctx, s); err != nil {
		_ = client.Close()
		return nil, err
	}
	s.log.Info("joined the fleet", "node", cfg.NodeID, "endpoints", strings.Join(cfg.Endpoints, ","), "lease_ttl", cfg.LeaseTTL)
	return s, nil
}

// Close stops keeping the lease alive, revokes it (the node leaves the
// health counts at once; its claims stay) and closes the client. A second
// Close returns the first one's result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.lease.stop()
		ctx, cancel := context.WithTimeout(context.Background(), s.CallTimeout())
		defer cancel()
		if err := s.lease.revoke(ctx); err != nil {
			s.log.Warn("could not revoke the node's lease: the node stays up until it expires", "error", err)
		}
		s.closeErr = s.client.Close()
		s.log.Info("left the fleet", "node", s.cfg.NodeID)
	})
	return s.closeErr
}

// quickStop bounds each call to etcd once the agent stops (Hurry) while
// etcd does not answer.
const quickStop = time.Second

// Hurry tells the Store that its agent is stopping: from now on, while
// etcd did not answer the latest call or the lease is not held, each call
// (the revocations of Close and of the fleet's elections included) waits
// at most a second, so that an agent whose etcd is gone stops in seconds.
// Its leases then expire by themselves, within their TTL.
// Hurry asks etcd once, for at most a second, whether it answers.
func (s *Store) Hurry() {
	s.hurry.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), quickStop)
	defer cancel()
	if _, err := s.client.Get(ctx, s.keys.node(s.cfg.NodeID), clientv3.WithCountOnly()); err != nil {
		s.reach.observe(s.unavailable("check that etcd answers before stopping", err))
	}
}

// CallTimeout is how long a call to etcd may wait now: the request
// timeout, or a second once the agent hurries to stop and etcd does not
// answer (see Hurry).
func (s *Store) CallTimeout() time.Duration {
	if s.hurry.Load() && (s.EtcdUnreachable() != nil || s.Standing(time.Now()) != model.StandingHeld) {
		return quickStop
	}
	return s.cfg.RequestTimeout
}

// clientConfig is how the Store's clients reach etcd.
func (s *Store) clientConfig() clientv3.Config { return s.cfg.ClientConfig() }

// NodeID is the node this Store speaks for.
func (s *Store) NodeID() string { return s.cfg.NodeID }

// call runs op with the request timeout. A failure to reach etcd, which
// op returns as unreached, becomes model.ErrFleetUnavailable, unless the
// caller's own ctx ended; every other error (a refusal, bad input, a
// corrupt record) passes through as it is.
func (s *Store) call(ctx context.Context, what string, op func(ctx context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, s.CallTimeout())
	defer cancel()
	start := time.Now()
	err := s.classify(ctx, what, op(cctx))
	s.cfg.Metrics.EtcdRequest(what, time.Since(start), err)
	return err
}

// classify is the error of a call that op ended with err (see call), and
// records whether etcd answered it.
func (s *Store) classify(ctx context.Context, what string, err error) error {
	var u *unreached
	switch {
	case !errors.As(err, &u):
		s.reach.observe(nil)
		return err
	case ctx.Err() != nil && u.sent:
		return s.outcomeUnknown(what, ctx.Err())
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w", what, ctx.Err())
	}
	err = s.unavailable(what, u.err)
	s.reach.observe(err)
	if u.sent {
		return s.outcomeUnknown(what, u.err)
	}
	return err
}

// decode decodes the record kv holds under key (record.go), and warns of
// one that is not sealed with the fleet's keyring: something other than an
// agent of the fleet wrote it.
func (s *Store) decode(key string, value []byte, m proto.Message) error {
	err := s.codec.decode(key, value, m)
	if errors.Is(err, ErrUnsealed) {
		s.log.Warn("refused a record in etcd that the fleet's keyring does not seal", "key", key, "error", err)
	}
	return err
}

// unavailable is the error of a call that etcd did not answer.
func (s *Store) unavailable(what string, err error) error {
	return model.Refusef(model.ErrFleetUnavailable,
		"%s: etcd at %s did not answer within %v (%v); claims are refused until etcd answers",
		what, strings.Join(s.cfg.Endpoints, ","), s.cfg.RequestTimeout, err)
}

// unreached is an error of the etcd client: etcd did not answer.
type unreached struct {
	err error
	// sent: the request was a write that may have reached etcd, and may
	// have been applied there.
	sent bool
}

func (u *unreached) Error() string { return u.err.Error() }

// outcomeUnknown is the error of a write whose answer etcd did not give
// (err): it may have been applied. It matches model.ErrOutcomeUnknown and
// model.ErrFleetUnavailable.
func (s *Store) outcomeUnknown(what string, err error) error {
	return errclass.Also(model.Refusef(model.ErrOutcomeUnknown,
		"%s: etcd at %s did not answer the write within %v (%v): it may or may not have been applied; sending the same request again is safe",
		what, strings.Join(s.cfg.Endpoints, ","), s.cfg.RequestTimeout, err), model.ErrFleetUnavailable)
}

// ErrEtcdDenied is returned when etcd refuses this agent's credentials
// (its user, password or certificate) or what they may do: etcd answered,
// and will answer the same until its users or roles change.
var ErrEtcdDenied = errclass.New(errclass.Denied, "etcd refused this agent's credentials")

// etcdErr marks err, from the etcd client, as unreached, or as denied when
// etcd refused the credentials; nil stays nil.
func etcdErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, rpctypes.ErrPermissionDenied), errors.Is(err, rpctypes.ErrAuthFailed),
		errors.Is(err, rpctypes.ErrInvalidAuthToken), errors.Is(err, rpctypes.ErrUserEmpty):
		return fmt.Errorf("%w: %v: give this agent an etcd user (or certificate) whose role may read and write the fleet's prefix", ErrEtcdDenied, err)
	}
	return &unreached{err: err}
}

// writeErr is etcdErr for a write: one that was sent (see withSentMark)
// and that etcd did not answer may have been applied (unreached.sent).
func writeErr(err error, sent bool) error {
	err = etcdErr(err)
	if u, ok := err.(*unreached); ok {
		u.sent = sent
	}
	return err
}

// keys builds the fleet's etcd keys. IDs, namespaces, node and plugin
// names never hold a "/" (names.Check), so the keys cannot collide.
type keys struct{ prefix string }

func (k keys) volumes() string                  { return k.prefix + "volumes/" }
func (k keys) volume(ns, id string) string      { return k.volumes() + ns + "/" + id }
func (k keys) namespace(ns string) string       { return k.volumes() + ns + "/" }
func (k keys) nodes() string                    { return k.prefix + "nodes/" }
func (k keys) node(node string) string          { return k.nodes() + node }
func (k keys) fingerprints() string             { return k.prefix + "fingerprints/" }
func (k keys) drains() string                   { return k.prefix + "drains/" }
func (k keys) drain(node string) string         { return k.drains() + node }
func (k keys) nodeFingerprints(n string) string { return k.fingerprints() + n + "/" }
func (k keys) election(name string) string      { return k.prefix + "elections/" + name + "/" }
func (k keys) fingerprint(node, typ, plugin string) string {
	return k.nodeFingerprints(node) + typ + "/" + plugin
}

// The indexes (index.go, nodes.go). A plugin volume ID may hold a "/", but
// it comes last, after a plugin name that cannot.
func (k keys) volumeCounts() string         { return k.prefix + "volumecount/" }
func (k keys) volumeCount(shard int) string { return k.volumeCounts() + strconv.Itoa(shard) }
func (k keys) pluginVolume(plugin, volume string) string {
	return k.prefix + "pluginvolumes/" + plugin + "/" + volume
}
func (k keys) pluginFingerprints(plugin string) string {
	return k.prefix + "pluginfingerprints/" + plugin + "/"
}
func (k keys) pluginExpect(plugin string) string { return k.prefix + "pluginexpect/" + plugin }
func (k keys) pluginFingerprint(plugin, node, typ string) string {
	return k.pluginFingerprints(plugin) + node + "/" + typ
}
