package fleet

import (
	"cmp"
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultCompactInterval is how often the fleet compacts etcd's revision
// history, as the Kubernetes apiserver does.
const DefaultCompactInterval = 5 * time.Minute

// CompactConfig configures a Compactor.
type CompactConfig struct {
	// Interval is how often the leader compacts (default
	// DefaultCompactInterval), and so the history kept: each compaction
	// discards the revisions older than the one the leader saw an interval
	// before, so between one and two intervals of history stay.
	Interval time.Duration
	// Logger receives a line per compaction; nil discards them.
	Logger hclog.Logger
}

// Compactor compacts the revision history of the fleet's etcd on one
// member of the fleet at a time: the leader of the election "compactor"
// (see elector). Every write in etcd (each claim, each lease renewal of a
// fingerprint change) adds a revision, and etcd keeps every old revision
// until it is compacted: without compaction a busy fleet's db grows until
// etcd's backend quota raises its alarm and refuses every write. An etcd
// that compacts by itself (`plugvisor etcd` does, with
// -auto-compaction-retention) needs no Compactor; one more compaction does
// no harm. Compaction frees space inside the db for new revisions; only a
// defragmentation returns it to the file system (docs/fleet-operations.md).
type Compactor struct {
	s        *Store
	interval time.Duration
	log      hclog.Logger
	elector  *elector

	compacted atomic.Int64
}

// StartCompactor joins the compactor election of s's fleet and compacts
// at cfg.Interval while it leads, until Stop.
func StartCompactor(s *Store, cfg CompactConfig) (*Compactor, error) {
	if cfg.Interval < 0 {
		return nil, model.Refusef(model.ErrInvalid,
			"compactor: Interval is %v: give a positive duration, or 0 for the default %v", cfg.Interval, DefaultCompactInterval)
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	c := &Compactor{s: s, interval: cmp.Or(cfg.Interval, DefaultCompactInterval), log: log.Named("fleet-compactor")}
	e, err := startElector(s, "compactor", c.log, c.lead)
	if err != nil {
		return nil, err
	}
	c.elector = e
	return c, nil
}

// Stop leaves the election (another member takes over) and waits.
func (c *Compactor) Stop() { c.elector.stop() }

// Leading reports whether this member leads the compactor election now.
func (c *Compactor) Leading() bool { return c.elector.leading.Load() }

// Compacted is the last revision this member compacted etcd to (0: none).
func (c *Compactor) Compacted() int64 { return c.compacted.Load() }

// lead compacts at every interval, to the revision seen at the previous
// one, until ctx ends.
func (c *Compactor) lead(ctx context.Context) {
	tick := time.NewTicker(c.interval)
	defer tick.Stop()
	seen, _ := c.revision(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now, err := c.revision(ctx)
		if err != nil {
			c.log.Warn("cannot read etcd's revision; compacting at the next interval", "error", err)
			continue
		}
		if seen > 0 {
			c.compact(ctx, seen)
		}
		seen = now
	}
}

// revision is etcd's current revision.
func (c *Compactor) revision(ctx context.Context) (int64, error) {
	var rev int64
	err := c.s.call(ctx, "read the revision", func(ctx context.Context) error {
		resp, err := c.s.client.Get(ctx, c.s.keys.nodes(), clientv3.WithCountOnly())
		if err != nil {
			return etcdErr(err)
		}
		rev = resp.Header.Revision
		return nil
	})
	return rev, err
}

// compact discards the revisions before rev. One compacted already (by
// etcd itself or a leader before this one) is no failure.
func (c *Compactor) compact(ctx context.Context, rev int64) {
	err := c.s.call(ctx, "compact", func(ctx context.Context) error {
		_, err := c.s.client.Compact(ctx, rev)
		if errors.Is(err, rpctypes.ErrCompacted) || errors.Is(err, rpctypes.ErrFutureRev) {
			return nil
		}
		return etcdErr(err)
	})
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("cannot compact etcd; trying again at the next interval", "revision", rev, "error", err)
		}
		return
	}
	c.compacted.Store(rev)
	c.log.Debug("compacted etcd's history", "revision", rev)
}
