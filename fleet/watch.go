package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
)

// NodeWatchConfig says whom Store.WatchNode tells of what etcd says of
// this node.
type NodeWatchConfig struct {
	// Claims hears each change of this node's claim index: which allocs
	// of the node claim a volume now. It runs on the watch's goroutine,
	// in etcd's order, and must not block for long.
	Claims func(model.NodeClaims)
	// Resync hears that every publish of the node must be checked against
	// the fleet's claims again, and why: the watch started or started
	// again, lost events (its revision was compacted, or it was
	// cancelled), or found etcd restored or replaced (its revision went
	// back, or its cluster ID changed), or CheckEvery passed. It runs on
	// the watch's goroutine.
	Resync func(reason string)
	// CheckEvery is how often Resync is called even though the watch saw
	// nothing amiss, as a last resort: a change of the fleet that neither
	// the watch nor its probe of the node's claim index showed is found
	// then. Zero is DefaultCheckEvery; a negative value, never.
	CheckEvery time.Duration
}

// DefaultCheckEvery is NodeWatchConfig.CheckEvery's default. Each check
// reads each volume the node has a record of once from etcd.
const DefaultCheckEvery = 5 * time.Minute

// checkReason is what a periodic check tells Resync.
const checkReason = "the periodic check of every mount against the fleet's claims"

// WatchNode follows, until stop, what etcd says of this node: every change
// of its claim index (claims/<node>/, nodeindex.go), and its liveness key.
// So the node's mounts follow the fleet's claims continuously, whoever
// changes them: the GC, a drain -force, an operator, a restore of etcd.
//
// The first read, of the index's revision, runs before WatchNode returns
// (when etcd answers within the request timeout), and the watch starts
// just after that revision: whatever a reader of the fleet sees after
// WatchNode returned, the watch reports every change since. A watch that
// cannot go on from where it was (compacted, cancelled), or that finds
// etcd's revision gone back or its cluster ID changed, starts again from
// etcd's revision now, and Resync hears why. While the watch has not
// heard from etcd for a whole lease TTL, the node's Standing is lost,
// as when its lease may have expired: a change of its claims might be
// waiting unheard. It asks etcd for progress every quarter TTL, and reads
// the node's claim index as etcd holds it at the revision the watch last
// heard: another index than the watch followed means a restored etcd
// whose revision the fleet's writes took past the old one.
//
// A liveness key found holding another agent's identity loses this agent
// its node ID (IdentityLost); one found deleted is put again.
func (s *Store) WatchNode(cfg NodeWatchConfig) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	w := &nodeWatch{s: s, cfg: cfg}
	w.fresh()
	s.watch.Store(w)
	rev, err := w.start(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.run(ctx, rev, err)
	}()
	var once sync.Once
	return func() {
		once.Do(cancel)
		<-done
		s.watch.CompareAndSwap(w, nil)
	}
}

// nodeWatch is one WatchNode.
type nodeWatch struct {
	s   *Store
	cfg NodeWatchConfig
	// heard is when etcd last answered the watch (an event or a
	// progress notice); see standing.go.
	heard atomic.Pointer[time.Time]
	// cluster and revision are the cluster ID and the highest revision
	// etcd's answers have carried; a lower one means a restored etcd.
	cluster  uint64
	revision int64
	// known is the revision up to which the watch knows etcd: its start,
	// then the header of each answer of the watch itself.
	known int64
	// index is the node's claim index as the watch saw it, each key with
	// its mod revision, up to indexRev: the start's read, then each answer
	// of the index's own watch.
	index    map[string]int64
	indexRev int64
	// resyncs counts the resyncs, for the metrics.
	resyncs atomic.Int64
}

func (w *nodeWatch) fresh() {
	now := time.Now()
	w.heard.Store(&now)
}

// start reads the revision the watch starts after.
func (w *nodeWatch) start(ctx context.Context) (int64, error) {
	var rev int64
	err := w.s.call(ctx, "start the watch of the node's claims", func(ctx context.Context) error {
		resp, err := w.s.client.Get(ctx, w.s.keys.claimsOf(w.s.cfg.NodeID), clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return etcdErr(err)
		}
		w.cluster, w.revision, rev = resp.Header.ClusterId, resp.Header.Revision, resp.Header.Revision
		w.known, w.indexRev, w.index = rev, rev, make(map[string]int64, len(resp.Kvs))
		for _, kv := range resp.Kvs {
			w.index[string(kv.Key)] = kv.ModRevision
		}
		return nil
	})
	return rev, err
}

// run watches from rev (err: the first read failed, so there is none
// yet), starting again whenever the watch cannot go on, until ctx ends.
func (w *nodeWatch) run(ctx context.Context, rev int64, err error) {
	reason := ""
	for {
		if err != nil {
			w.s.log.Warn("cannot watch this node's claims yet: retrying", "error", err)
			if sleep(ctx, w.s.cfg.LeaseTTL/4) != nil {
				return
			}
			if rev, err = w.start(ctx); err != nil {
				continue
			}
			reason = "the watch of this node's claims started after etcd did not answer"
		}
		if reason != "" {
			w.resyncs.Add(1)
			w.cfg.Resync(reason)
		}
		reason = w.follow(ctx, rev)
		if ctx.Err() != nil {
			return
		}
		w.s.log.Warn("the watch of this node's claims starts again: every mount is checked against the fleet's claims", "why", reason)
		rev, err = w.start(ctx)
	}
}

// follow watches the index and the liveness key from just after rev until
// ctx ends or the watch cannot go on, and returns why.
func (w *nodeWatch) follow(ctx context.Context, rev int64) string {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	claims := w.s.client.Watch(wctx, w.s.keys.claimsOf(w.s.cfg.NodeID), clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithProgressNotify())
	live := w.s.client.Watch(wctx, w.s.keys.node(w.s.cfg.NodeID), clientv3.WithRev(rev+1))
	tick := time.NewTicker(w.s.cfg.LeaseTTL / 4)
	defer tick.Stop()
	var checks <-chan time.Time
	if every := cmp.Or(w.cfg.CheckEvery, DefaultCheckEvery); every > 0 {
		check := time.NewTicker(every)
		defer check.Stop()
		checks = check.C
	}
	for {
		select {
		case <-ctx.Done():
			return ""
		case <-checks:
			w.cfg.Resync(checkReason)
		case resp, ok := <-claims:
			if why := w.check(resp, ok); why != "" {
				return why
			}
			for _, ev := range resp.Events {
				w.claimsChanged(ev)
			}
			w.indexRev = max(w.indexRev, resp.Header.Revision)
		case resp, ok := <-live:
			if why := w.check(resp, ok); why != "" {
				return why
			}
			for _, ev := range resp.Events {
				if ev.Type == mvccpb.DELETE {
					w.s.noteHolder(nil)
				} else {
					w.s.noteHolder(ev.Kv)
				}
			}
		case <-tick.C:
			if why := w.probe(wctx); why != "" {
				return why
			}
		}
	}
}

// probe asks etcd for the watch's progress, which answers on the watch's
// channels, and reads etcd's revision now: a progress notice carries the
// watch's own revision, even after etcd went back to an older one, so only
// a read tells. It returns why the watch cannot go on, or "".
func (w *nodeWatch) probe(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, w.s.cfg.RequestTimeout)
	defer cancel()
	_ = w.s.client.RequestProgress(ctx)
	resp, err := w.s.client.Get(ctx, w.s.keys.node(w.s.cfg.NodeID), clientv3.WithCountOnly())
	if err != nil {
		return ""
	}
	if why := w.header(*resp.Header, false); why != "" {
		return why
	}
	if resp.Header.Revision <= w.known {
		// Nothing happened in etcd since the watch last heard: it has
		// missed nothing. etcd sends no progress notice to a watch that
		// starts after its revision now (a watch just started or just
		// reconnected, while no one writes), so without this a quiet
		// fleet's watch would look stale and fence the node.
		w.fresh()
	}
	return w.verifyIndex(ctx)
}

// verifyIndex reads the node's claim index as etcd holds it at the
// revision the index's watch last heard (indexRev), and compares it with
// what the watch saw. Another index means another history: etcd was
// restored from a snapshot, and the fleet's writes took its revision past
// the old one before a probe read it, so the revision never showed it.
// It returns why the watch cannot go on, or "". A read that fails says
// nothing: a compacted revision is no sign, and a silent etcd is the
// standing's to judge.
func (w *nodeWatch) verifyIndex(ctx context.Context) string {
	if w.indexRev == 0 {
		return ""
	}
	resp, err := w.s.client.Get(ctx, w.s.keys.claimsOf(w.s.cfg.NodeID), clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithRev(w.indexRev))
	switch {
	case errors.Is(err, rpctypes.ErrFutureRev):
		return fmt.Sprintf("etcd has no revision %d, which the watch heard: etcd was restored from a snapshot", w.indexRev)
	case err != nil:
		return ""
	}
	same := len(resp.Kvs) == len(w.index)
	for _, kv := range resp.Kvs {
		same = same && w.index[string(kv.Key)] == kv.ModRevision
	}
	if same {
		return ""
	}
	return fmt.Sprintf("etcd's claim index of this node at revision %d is not the one the watch saw (%d keys, against %d): etcd was restored from a snapshot",
		w.indexRev, len(resp.Kvs), len(w.index))
}

// check is why the watch cannot go on after resp (ok false: the channel
// closed), or "".
func (w *nodeWatch) check(resp clientv3.WatchResponse, ok bool) string {
	switch {
	case !ok:
		return "the watch's channel closed"
	case resp.CompactRevision != 0:
		return fmt.Sprintf("the watch lost events: etcd compacted its history to revision %d (etcd restored with --mark-compacted, or the watch fell behind)", resp.CompactRevision)
	case resp.Canceled:
		return fmt.Sprintf("etcd cancelled the watch (%v)", resp.Err())
	case resp.Err() != nil:
		return fmt.Sprintf("the watch failed (%v)", resp.Err())
	case resp.IsProgressNotify():
		// A progress notice carries the watch's own revision, not etcd's.
		w.known = max(w.known, resp.Header.Revision)
		w.fresh()
		return ""
	}
	return w.header(resp.Header, true)
}

// header checks an answer's header against the ones before: a revision
// lower than one seen, or another cluster ID, means etcd was restored or
// replaced, and what the watch knows is void. An answer of the watch
// itself (heard) makes it fresh.
func (w *nodeWatch) header(h etcdserverpb.ResponseHeader, heard bool) string {
	switch {
	case h.ClusterId != 0 && w.cluster != 0 && h.ClusterId != w.cluster:
		return fmt.Sprintf("etcd's cluster ID changed from %x to %x: etcd was replaced or restored from a snapshot", w.cluster, h.ClusterId)
	case h.Revision != 0 && h.Revision < w.revision:
		return fmt.Sprintf("etcd's revision went back from %d to %d: etcd was restored from a snapshot", w.revision, h.Revision)
	}
	w.revision = max(w.revision, h.Revision)
	if heard {
		w.known = max(w.known, h.Revision)
		w.fresh()
	}
	return ""
}

// claimsChanged tells Claims of the change ev made to the index, and
// keeps it in the watch's copy.
func (w *nodeWatch) claimsChanged(ev *clientv3.Event) {
	if ev.Type == mvccpb.DELETE {
		delete(w.index, string(ev.Kv.Key))
	} else {
		w.index[string(ev.Kv.Key)] = ev.Kv.ModRevision
	}
	_, ref, ok := w.s.indexEntry(w.s.keys.claims(), string(ev.Kv.Key), nil)
	if !ok {
		return
	}
	change := model.NodeClaims{Namespace: ref.ns, VolumeID: ref.id, Known: true}
	if ev.Type != mvccpb.DELETE {
		_, change.Allocs, change.Known = parseClaimIndexValue(string(ev.Kv.Value))
	}
	w.cfg.Claims(change)
}

// watchAge is how long the node's watch has not heard from etcd, 0 while
// no watch runs.
func (s *Store) watchAge(now time.Time) time.Duration {
	w := s.watch.Load()
	if w == nil {
		return 0
	}
	return now.Sub(*w.heard.Load())
}

// Resyncs counts the times the node's watch started again and asked for
// every mount to be checked (0 while no watch runs).
func (s *Store) Resyncs() int64 {
	if w := s.watch.Load(); w != nil {
		return w.resyncs.Load()
	}
	return 0
}
