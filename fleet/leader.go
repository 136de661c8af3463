package fleet

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// elector runs a fleet-wide loop on one node of the fleet at a time: the
// leader of an etcd election (concurrency.Election) at
// <prefix>elections/<name>/. Each term is a session with a lease of the
// fleet's LeaseTTL: a leader that stops cleanly resigns and another node
// takes over at once; one that dies or is cut off from etcd loses the
// lease, and another takes over within the TTL. Two leaders can overlap
// for a moment (one that has not yet seen its lease expire), so what a
// leader does must be safe when done twice: every write it makes is a
// transaction that checks what it relies on.
//
// It keeps a client of its own, closed by stop, so that a stop while etcd
// does not answer waits for no etcd call.
type elector struct {
	s      *Store
	key    string
	log    hclog.Logger
	client *clientv3.Client
	work   func(ctx context.Context)

	leading atomic.Bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// startElector campaigns for the election name until stop, and runs work
// with a context that ends when the term ends, each time it wins.
func startElector(s *Store, name string, log hclog.Logger, work func(ctx context.Context)) (*elector, error) {
	client, err := clientv3.New(s.clientConfig())
	if err != nil {
		return nil, s.unavailable("connect for the "+name+" election", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &elector{s: s, key: s.keys.election(name), log: log, client: client, work: work, cancel: cancel, done: make(chan struct{})}
	go e.run(ctx)
	return e, nil
}

// run runs terms until ctx ends, pausing a quarter of the TTL after a term
// that could not start (etcd did not answer).
func (e *elector) run(ctx context.Context) {
	defer close(e.done)
	for ctx.Err() == nil {
		if err := e.term(ctx); err != nil && ctx.Err() == nil {
			e.log.Debug("no term in the election; trying again", "election", e.key, "error", err)
			if sleep(ctx, e.s.cfg.LeaseTTL/4) != nil {
				return
			}
		}
	}
}

// term is one session: campaign, work while leading, resign.
func (e *elector) term(ctx context.Context) error {
	session, err := concurrency.NewSession(e.client, concurrency.WithTTL(int(e.s.cfg.LeaseTTL/time.Second)), concurrency.WithContext(ctx))
	if err != nil {
		return err
	}
	defer e.revoke(session)
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-session.Done(): // the lease is lost: the term is over
			cancel()
		case <-tctx.Done():
		}
	}()
	election := concurrency.NewElection(session, e.key)
	if err := election.Campaign(tctx, e.s.cfg.NodeID); err != nil {
		return err
	}
	e.leading.Store(true)
	e.log.Info("leads the fleet", "election", e.key, "node", e.s.cfg.NodeID)
	e.work(tctx)
	e.leading.Store(false)
	e.log.Info("no longer leads the fleet", "election", e.key, "node", e.s.cfg.NodeID)
	return nil
}

// revoke ends the session's lease, which deletes its election key: the
// next candidate leads at once. When etcd does not answer, the lease
// expires by itself.
func (e *elector) revoke(session *concurrency.Session) {
	session.Orphan()
	ctx, cancel := context.WithTimeout(context.Background(), e.s.CallTimeout())
	defer cancel()
	_, _ = e.client.Revoke(ctx, session.Lease())
}

// stop ends the campaign or the term and waits for it; past the request
// timeout it closes the client, which ends any call still waiting on etcd.
func (e *elector) stop() {
	e.cancel()
	select {
	case <-e.done:
	case <-time.After(e.s.CallTimeout()):
		_ = e.client.Close()
		<-e.done
	}
	_ = e.client.Close()
}

// sleep pauses for d, or until ctx ends (its error).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// watched are the names (the keys less prefix) that a watch answer
// changed; false when the watch failed or ended (received is false).
func watched(resp clientv3.WatchResponse, received bool, prefix string) ([]string, bool) {
	if !received || resp.Err() != nil {
		return nil, false
	}
	names := make([]string, 0, len(resp.Events))
	for _, ev := range resp.Events {
		names = append(names, strings.TrimPrefix(string(ev.Kv.Key), prefix))
	}
	return names, true
}
