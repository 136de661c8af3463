package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/names"
)

// lease is this node's lease: its liveness key and its fingerprints live
// under it. A goroutine keeps it alive; when etcd loses it (the node was
// cut off for longer than the TTL), the goroutine grants a new one as soon
// as etcd answers and puts the liveness key and the fingerprints again.
type lease struct {
	s      *Store
	cancel context.CancelFunc
	done   chan struct{}

	// mu orders the writes of this node's keys (PutFingerprints against a
	// re-grant) and guards id and fps.
	mu  sync.Mutex
	id  clientv3.LeaseID
	fps []*messages.CSIFingerprint

	// renewed is when etcd last answered a grant or a keep-alive of the
	// lease (see standing.go).
	renewed atomic.Pointer[time.Time]
}

// startLease grants the node's lease, puts its liveness key and starts
// keeping the lease alive.
func startLease(ctx context.Context, s *Store) (*lease, error) {
	l := &lease{s: s, done: make(chan struct{})}
	if err := s.call(ctx, "grant the node's lease", l.grant); err != nil {
		return nil, err
	}
	kctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	go l.keepAlive(kctx)
	return l, nil
}

// grant grants a new lease and puts the liveness key and the fingerprints
// under it, in one transaction that holds only while the node ID is this
// agent's (putLiveness). When another agent holds it, the new lease is
// revoked and the error matches ErrNodeIDTaken.
func (l *lease) grant(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	granted, err := l.s.client.Grant(ctx, int64(l.s.cfg.LeaseTTL/time.Second))
	if err != nil {
		return etcdErr(err)
	}
	puts, err := l.s.fingerprintPuts(l.fps, granted.ID)
	if err == nil {
		err = l.s.putLiveness(ctx, granted.ID, puts)
	}
	if err != nil {
		_, _ = l.s.client.Revoke(ctx, granted.ID)
		return err
	}
	l.id = granted.ID
	l.touch()
	return nil
}

// reassert puts the liveness key again under the lease held now, after a
// watch saw it deleted while the lease lives (an operator's etcdctl del):
// without it the fleet counts the node down, and its GC would free the
// node's claims. Another agent holding the key by then loses this one its
// node ID.
func (l *lease) reassert() {
	err := l.s.call(context.Background(), "put the liveness key again", func(ctx context.Context) error {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.s.putLiveness(ctx, l.id, nil)
	})
	switch {
	case errors.Is(err, ErrNodeIDTaken):
		if l.s.lost.lose(err.Error()) {
			l.s.log.Error("this agent lost its node ID to another", "node", l.s.cfg.NodeID, "why", err)
		}
	case err != nil:
		l.s.log.Warn("the node's liveness key was deleted and cannot be put again yet", "node", l.s.cfg.NodeID, "error", err)
	default:
		l.s.log.Warn("the node's liveness key was deleted while its lease lives: put it again", "node", l.s.cfg.NodeID)
	}
}

// keepAlive renews the lease until ctx ends, and grants a new one
// whenever etcd loses it.
func (l *lease) keepAlive(ctx context.Context) {
	defer close(l.done)
	for {
		l.mu.Lock()
		id := l.id
		l.mu.Unlock()
		if answers, err := l.s.client.KeepAlive(ctx, id); err == nil {
			for range answers {
				l.touch()
				l.s.reach.observe(nil)
			}
		}
		if ctx.Err() != nil {
			return
		}
		l.s.log.Warn("the node's lease is lost: the fleet counts this node down until etcd grants a new one", "node", l.s.cfg.NodeID)
		if !l.regrant(ctx) {
			return
		}
		l.s.log.Info("the node is up again under a new lease", "node", l.s.cfg.NodeID)
	}
}

// touch notes that etcd renewed the lease just now.
func (l *lease) touch() {
	now := time.Now()
	l.renewed.Store(&now)
}

// regrant grants a new lease, retrying until it succeeds (true) or ctx
// ends (false). While another agent holds the node ID, this one has lost
// it (Standing is lost) and keeps trying: the ID is its own again once
// the other agent leaves.
func (l *lease) regrant(ctx context.Context) bool {
	retry := time.NewTicker(l.s.cfg.LeaseTTL / 4)
	defer retry.Stop()
	for {
		err := l.s.call(ctx, "grant a new lease", l.grant)
		switch {
		case err == nil:
			if l.s.lost.regain() {
				l.s.log.Info("this agent holds its node ID again", "node", l.s.cfg.NodeID)
			}
			return true
		case errors.Is(err, ErrNodeIDTaken):
			if l.s.lost.lose(err.Error()) {
				l.s.log.Error("this agent lost its node ID to another while its lease was lost: it fences its writers and takes no new claim",
					"node", l.s.cfg.NodeID, "why", err)
			}
		default:
			l.s.log.Debug("could not grant a new lease yet", "error", err)
		}
		select {
		case <-ctx.Done():
			return false
		case <-retry.C:
		}
	}
}

// stop stops keeping the lease alive and waits for the goroutine.
func (l *lease) stop() {
	l.cancel()
	<-l.done
}

// revoke revokes the lease: the liveness key and fingerprints go at once.
// A lease etcd no longer has (it expired) took them already.
func (l *lease) revoke(ctx context.Context) error {
	l.mu.Lock()
	id := l.id
	l.mu.Unlock()
	_, err := l.s.client.Revoke(ctx, id)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return nil
	}
	return err
}

// PutFingerprints replaces this node's fingerprints with fps, under the
// node's lease, in one transaction: the ones not in fps go. Each must be a
// well-formed CSI fingerprint (model.ErrInvalid otherwise, and
// nothing changes); of two with the same type and plugin, the last counts.
// This node's fingerprints are remembered, so that they are put again under
// a new lease after etcd lost the old one.
func (s *Store) PutFingerprints(ctx context.Context, fps []*messages.CSIFingerprint) error {
	kept := make([]*messages.CSIFingerprint, 0, len(fps))
	for _, fp := range fps {
		info, err := model.InstanceFromFingerprint(fp)
		if err == nil {
			err = names.Check("plugin name", info.PluginID)
		}
		if err != nil {
			return model.Refusef(model.ErrInvalid, "fingerprint: %v", err)
		}
		kept = append(kept, proto.Clone(fp).(*messages.CSIFingerprint))
	}
	return s.call(ctx, "put fingerprints", func(ctx context.Context) error {
		l := s.lease
		l.mu.Lock()
		defer l.mu.Unlock()
		l.fps = kept
		prefix := s.keys.nodeFingerprints(s.cfg.NodeID)
		old, err := s.client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return etcdErr(err)
		}
		ops, err := s.fingerprintPuts(kept, l.id)
		if err != nil {
			return err
		}
		for _, kv := range old.Kvs {
			if !slices.ContainsFunc(ops, func(op clientv3.Op) bool { return string(op.KeyBytes()) == string(kv.Key) }) {
				ops = append(ops, clientv3.OpDelete(string(kv.Key)), clientv3.OpDelete(s.byPlugin(string(kv.Key))))
			}
		}
		wctx, failed := sending(ctx)
		_, err = s.client.Txn(wctx).Then(ops...).Commit()
		return failed(err)
	})
}

// fingerprintPuts are the puts of this node's fingerprints under lease id,
// one per type and plugin, the last of each winning, each with its copy
// under pluginfingerprints/<plugin>/<node>/<type> (byPlugin), which a
// volume's read of its own plugin's health reads.
func (s *Store) fingerprintPuts(fps []*messages.CSIFingerprint, id clientv3.LeaseID) ([]clientv3.Op, error) {
	values := map[string]string{}
	for _, fp := range fps {
		key := s.keys.fingerprint(s.cfg.NodeID, fp.GetType(), fp.GetName())
		for _, k := range []string{key, s.byPlugin(key)} {
			value, err := s.codec.encode(k, fp)
			if err != nil {
				return nil, err
			}
			values[k] = value
		}
	}
	var ops []clientv3.Op
	for _, key := range slices.Sorted(maps.Keys(values)) {
		ops = append(ops, clientv3.OpPut(key, values[key], clientv3.WithLease(id)))
	}
	return ops, nil
}

// NodeUp reports whether node is up: its liveness key, under its lease,
// is there.
func (s *Store) NodeUp(ctx context.Context, node string) (bool, error) {
	if err := names.Check("node ID", node); err != nil {
		return false, model.Refusef(model.ErrInvalid, "%v", err)
	}
	up := false
	err := s.call(ctx, "look up a node", func(ctx context.Context) error {
		resp, err := s.client.Get(ctx, s.keys.node(node), clientv3.WithCountOnly())
		if err != nil {
			return etcdErr(err)
		}
		up = resp.Count > 0
		return nil
	})
	return up, err
}

// Plugins returns every plugin fingerprinted on a live node, sorted by ID,
// with the fingerprints of its instances (keyed by node) and its health
// counts over the live nodes.
func (s *Store) Plugins(ctx context.Context) ([]*model.CSIPlugin, error) {
	var plugins map[string]*model.CSIPlugin
	err := s.call(ctx, "list plugins", func(ctx context.Context) error {
		resp, err := s.client.Get(ctx, s.keys.fingerprints(), clientv3.WithPrefix())
		if err != nil {
			return etcdErr(err)
		}
		plugins, err = s.decodePlugins(resp.Kvs, false)
		return err
	})
	if err != nil {
		return nil, err
	}
	return sortedPlugins(plugins), nil
}

// byPlugin is the key of the copy of the fingerprint under key, a key of
// fingerprints/<node>/<type>/<plugin>: pluginfingerprints/<plugin>/<node>/<type>.
func (s *Store) byPlugin(key string) string {
	node, rest, _ := strings.Cut(strings.TrimPrefix(key, s.keys.fingerprints()), "/")
	typ, plugin, _ := strings.Cut(rest, "/")
	return s.keys.pluginFingerprint(plugin, node, typ)
}

// decodePlugins builds the plugins from the fingerprint records of every
// live node, under fingerprints/ or, byPlugin, their copies under
// pluginfingerprints/. A record that does not decode, or whose key does
// not match its node, type and plugin, is corrupt.
func (s *Store) decodePlugins(kvs []*mvccpb.KeyValue, byPlugin bool) (map[string]*model.CSIPlugin, error) {
	plugins := map[string]*model.CSIPlugin{}
	for _, kv := range kvs {
		key := string(kv.Key)
		var fp messages.CSIFingerprint
		if err := s.decode(key, kv.Value, &fp); err != nil {
			return nil, err
		}
		node, _, _ := strings.Cut(strings.TrimPrefix(key, s.keys.fingerprints()), "/")
		want := s.keys.fingerprint(node, fp.GetType(), fp.GetName())
		if byPlugin {
			node, _, _ = strings.Cut(strings.TrimPrefix(key, s.keys.pluginFingerprints(fp.GetName())), "/")
			want = s.keys.pluginFingerprint(fp.GetName(), node, fp.GetType())
		}
		if want != key {
			return nil, corrupt(key, fmt.Errorf("it holds fingerprint %s/%s", fp.GetType(), fp.GetName()))
		}
		info, err := model.InstanceFromFingerprint(&fp)
		if err != nil {
			return nil, corrupt(key, err)
		}
		p := plugins[info.PluginID]
		if p == nil {
			p = model.NewCSIPlugin(info.PluginID, 0)
			plugins[info.PluginID] = p
		}
		if err := p.AddPlugin(node, info); err != nil {
			return nil, corrupt(key, err)
		}
	}
	return plugins, nil
}
