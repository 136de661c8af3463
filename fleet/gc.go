package fleet

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
)

// DefaultGCGrace is how long a node must be down before GC frees its claims.
const DefaultGCGrace = 5 * time.Minute

// GCConfig configures GC.
type GCConfig struct {
	// Interval, when set, makes GC run by itself: it joins the fleet's GC
	// election, and while it leads it watches the nodes' liveness keys,
	// and looks again at the nodes it knows to be down at this interval,
	// as a fallback to the watch (0: GC never runs by itself; Step still
	// works).
	Interval time.Duration
	// Grace is how long a node must have been seen down before its claims
	// are freed (default DefaultGCGrace).
	Grace time.Duration
	// Logger receives one line per freed claim; nil discards them.
	Logger hclog.Logger
	// AfterStep, when set, is called after each look GC takes by itself,
	// on GC's goroutine. The agent no longer needs it: a Detacher on each
	// node detaches what the freed claims strand.
	AfterStep func(ctx context.Context)
}

// Freed is one claim GC freed.
type Freed struct {
	Namespace, VolumeID, AllocID, NodeID string
}

// GC frees the claims of nodes that have been down (no liveness key: their
// lease expired or was revoked) for longer than a grace period, as Nomad's
// volume watcher does: the allocs of a dead node will never release them.
// Every node's claims stay until then: a node cut off for a moment keeps
// them.
//
// One GC runs per fleet: with an Interval, each node's GC campaigns in
// the fleet's "gc" election, and only the leader works. It is woken by a
// watch on the nodes' liveness keys, not by reading the volumes: a node's
// claims and attachments are found through the node index (nodeindex.go), so
// an idle fleet costs nothing per volume. When a node is first seen down
// is kept in the leader's memory, so a new leader (or a restarted GC)
// waits a whole grace period again (it frees later, never sooner); a node
// that comes back and goes down again unseen has its grace counted from
// when it was first seen down. A claim is freed in a transaction that also
// checks that the node is still down, so a node that comes back keeps its
// claims. A down node with attachments is marked stranded/<node> at once
// and again once its claims are freed: the Detachers of the nodes that run
// the volumes' controllers then detach what no claim holds.
type GC struct {
	s        *Store
	grace    time.Duration
	interval time.Duration
	log      hclog.Logger
	// afterStep is GCConfig.AfterStep.
	afterStep func(ctx context.Context)
	elector   *elector

	// mu serialises the looks and guards downSince.
	mu        sync.Mutex
	downSince map[string]time.Time
}

// StartGC returns the GC of s and, when cfg.Interval is set, joins the
// fleet's GC election: the leader runs until Stop.
func StartGC(s *Store, cfg GCConfig) (*GC, error) {
	if cfg.Interval < 0 || cfg.Grace < 0 {
		return nil, model.Refusef(model.ErrInvalid,
			"GC: Interval (%v) and Grace (%v) must not be negative; 0 means no GC run by itself and the default grace %v",
			cfg.Interval, cfg.Grace, DefaultGCGrace)
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	g := &GC{s: s, grace: cmp.Or(cfg.Grace, DefaultGCGrace), interval: cfg.Interval, log: log.Named("fleet-gc"),
		downSince: map[string]time.Time{}, afterStep: cfg.AfterStep}
	if cfg.Interval == 0 {
		return g, nil
	}
	e, err := startElector(s, "gc", g.log, g.lead)
	if err != nil {
		return nil, err
	}
	g.elector = e
	return g, nil
}

// Stop leaves the election, if any (another node's GC takes over), and
// waits.
func (g *GC) Stop() {
	if g.elector != nil {
		g.elector.stop()
	}
}

// Leading reports whether this GC leads the fleet's GC election now.
func (g *GC) Leading() bool { return g.elector != nil && g.elector.leading.Load() }

// Step looks once, at time now, at every node in the node index: it notes
// the nodes that hold claims or attachments and are down, forgets those
// that are up again, and frees every claim of a node seen down since at
// least Grace before now. It returns the claims it freed, sorted. It reads
// the index's keys, not the volumes; the leader runs it at the start of
// its term and whenever its watch is lost.
func (g *GC) Step(ctx context.Context, now time.Time) ([]Freed, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	warned := warnedKeys{}
	nodes, err := g.s.indexedNodes(ctx, warned)
	if err != nil {
		return nil, err
	}
	for node := range g.downSince {
		nodes[node] = true
	}
	return g.look(ctx, now, slices.Sorted(maps.Keys(nodes)), warned)
}

// lookAt is Step for the given nodes only: those whose liveness key
// changed, or those known to be down.
func (g *GC) lookAt(ctx context.Context, now time.Time, nodes []string) ([]Freed, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.look(ctx, now, nodes, warnedKeys{})
}

// look is a look at nodes, with mu held; warned is the look's
// (indexEntry), which warns once of a malformed key it reads twice.
func (g *GC) look(ctx context.Context, now time.Time, nodes []string, warned warnedKeys) ([]Freed, error) {
	states, err := g.s.nodeStates(ctx, nodes)
	if err != nil {
		return nil, err
	}
	var freed []Freed
	for _, node := range nodes {
		st := states[node]
		since, seen := g.downSince[node]
		var out []Freed
		switch {
		case st.up || st.claims == 0 && st.attachments == 0:
			delete(g.downSince, node)
			if st.marked {
				err = g.s.mark(ctx, node, false)
			}
		case !seen:
			g.downSince[node] = now
			if st.attachments > 0 && !st.marked {
				err = g.s.mark(ctx, node, true)
			}
		case now.Sub(since) >= g.grace && st.claims > 0:
			out, err = g.freeNode(ctx, node, now.Sub(since), warned)
			freed = append(freed, out...)
			if err == nil && len(out) > 0 && st.attachments > 0 {
				err = g.s.mark(ctx, node, true)
			}
		}
		if err != nil {
			break
		}
	}
	slices.SortFunc(freed, func(a, b Freed) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.VolumeID, b.VolumeID), cmp.Compare(a.AllocID, b.AllocID))
	})
	return freed, err
}

// freeNode frees every claim of node, found through the node index,
// unless node is up again; warned is indexEntry's.
func (g *GC) freeNode(ctx context.Context, node string, down time.Duration, warned warnedKeys) ([]Freed, error) {
	var refs []volumeRef
	err := g.s.call(ctx, "find the claims of a down node", func(ctx context.Context) (err error) {
		refs, err = g.s.indexedVolumes(ctx, g.s.claimIndex(), node, warned)
		return err
	})
	if err != nil {
		return nil, err
	}
	var freed []Freed
	for _, ref := range refs {
		out, err := g.freeOn(ctx, ref, node, down)
		if err != nil {
			return freed, err
		}
		freed = append(freed, out...)
	}
	return freed, nil
}

// freeOn frees every claim of node on the volume ref, unless node is up
// again.
func (g *GC) freeOn(ctx context.Context, ref volumeRef, node string, down time.Duration) ([]Freed, error) {
	var freed []Freed
	nodeKey := g.s.keys.node(node)
	nodeGone := clientv3.Compare(clientv3.CreateRevision(nodeKey), "=", 0)
	_, err := g.s.update(ctx, "free the claims of a down node", ref.ns, ref.id, func(v *model.CSIVolume) (*model.CSIVolume, error) {
		freed = nil
		if v == nil {
			return nil, nil
		}
		// The guard makes the write wait for the node to be down; a node
		// up again stops the retries here.
		up, err := g.s.client.Get(ctx, nodeKey, clientv3.WithCountOnly())
		if err != nil || up.Count > 0 {
			return v, etcdErr(err)
		}
		var changed *model.CSIVolume
		changed, freed = freeClaimsOf(v, node)
		return changed, nil
	}, func(context.Context, *model.CSIVolume) ([]clientv3.Cmp, error) { return []clientv3.Cmp{nodeGone}, nil })
	if err != nil {
		return nil, err
	}
	for _, f := range freed {
		g.log.Warn("freed the claim of a node down longer than the grace period", "namespace", f.Namespace, "volume", f.VolumeID,
			"alloc", f.AllocID, "node", f.NodeID, "down", down.Round(time.Second), "grace", g.grace)
	}
	g.s.cfg.Metrics.GCFreed(len(freed))
	return freed, nil
}

// volumesAndNodes reads, at one revision, the volumes keep keeps and the
// set of live nodes.
func (s *Store) volumesAndNodes(ctx context.Context, keep func(*model.CSIVolume) bool) ([]*model.CSIVolume, map[string]bool, error) {
	var volumes []*model.CSIVolume
	live := map[string]bool{}
	err := s.call(ctx, "read claims and nodes", func(ctx context.Context) error {
		resp, err := s.client.Txn(ctx).Then(
			clientv3.OpGet(s.keys.volumes(), clientv3.WithPrefix()),
			clientv3.OpGet(s.keys.nodes(), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		).Commit()
		if err != nil {
			return etcdErr(err)
		}
		for _, kv := range resp.Responses[0].GetResponseRange().GetKvs() {
			v, err := s.decodeVolume(kv)
			if err != nil {
				return err
			}
			if keep(v) {
				volumes = append(volumes, v)
			}
		}
		for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
			live[strings.TrimPrefix(string(kv.Key), s.keys.nodes())] = true
		}
		return nil
	})
	return volumes, live, err
}

// lead is the GC's work while it leads the fleet's GC election: it checks
// the node index once, then looks at every indexed node, and then at the
// nodes whose liveness key changes (a watch on nodes/), at the nodes known
// down when their grace ends, and at those every Interval. When the watch
// is lost, it starts again with a whole look.
func (g *GC) lead(ctx context.Context) {
	if fixed, err := g.s.reindex(ctx); err != nil {
		g.log.Warn("cannot check the node index; the GC may miss claims written before it existed", "error", err)
	} else if fixed > 0 {
		g.log.Info("filled in the node index", "volumes", fixed)
	}
	for ctx.Err() == nil {
		g.watch(ctx)
		_ = sleep(ctx, g.interval)
	}
}

// watch looks at every indexed node, then at nodes as their liveness
// changes, until the watch or that first look fails, or ctx ends.
func (g *GC) watch(ctx context.Context) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	events := g.s.client.Watch(wctx, g.s.keys.nodes(), clientv3.WithPrefix())
	if _, err := g.Step(ctx, time.Now()); err != nil {
		g.stepFailed(ctx, err)
		return // the whole look again, after an interval
	}
	g.after(ctx)
	tick := time.NewTicker(g.interval)
	defer tick.Stop()
	for {
		var nodes []string
		select {
		case <-ctx.Done():
			return
		case resp, ok := <-events:
			if nodes, ok = watched(resp, ok, g.s.keys.nodes()); !ok {
				return
			}
		case <-g.due():
			nodes = g.down()
		case <-tick.C:
			nodes = g.down()
		}
		if len(nodes) == 0 {
			continue
		}
		if _, err := g.lookAt(ctx, time.Now(), nodes); err != nil {
			g.stepFailed(ctx, err)
		}
		g.after(ctx)
	}
}

// stepFailed logs a failed look, unless the term is over.
func (g *GC) stepFailed(ctx context.Context, err error) {
	if ctx.Err() == nil {
		g.log.Warn("GC look failed; trying again at the next interval", "error", err)
	}
}

// after runs GCConfig.AfterStep, if any.
func (g *GC) after(ctx context.Context) {
	if g.afterStep != nil {
		g.afterStep(ctx)
	}
}

// down are the nodes known down, sorted.
func (g *GC) down() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Sorted(maps.Keys(g.downSince))
}

// due fires when the next grace of a node known down ends; nil when no
// grace is running.
func (g *GC) due() <-chan time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	var first time.Time
	for _, since := range g.downSince {
		if end := since.Add(g.grace); end.After(time.Now()) && (first.IsZero() || end.Before(first)) {
			first = end
		}
	}
	if first.IsZero() {
		return nil
	}
	return time.After(time.Until(first))
}
