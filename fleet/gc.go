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

	"github.com/plugvisor/plugvisor/csi/catalog"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
)

// DefaultGCGrace is how long a node must be down before GC frees its claims.
const DefaultGCGrace = 5 * time.Minute

// GCConfig configures GC.
type GCConfig struct {
	// Interval is how often GC looks (0: GC never runs by itself; Step
	// still works).
	Interval time.Duration
	// Grace is how long a node must have been seen down before its claims
	// are freed (default DefaultGCGrace).
	Grace time.Duration
	// Logger receives one line per freed claim; nil discards them.
	Logger hclog.Logger
	// AfterStep, when set, is called after each step GC runs by itself,
	// on GC's goroutine: where the caller detaches the attachments that
	// freed claims strand (see Store.Stranded).
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
// them. When a node is first seen down is kept in memory, so a restarted
// GC waits a whole grace period again (it frees later, never sooner); a
// node that comes back and goes down again between two steps is not seen
// up, so its grace counts from the first step that saw it down. A
// claim is freed in a transaction that also checks that the node is still
// down, so a node that comes back keeps its claims.
type GC struct {
	s     *Store
	grace time.Duration
	log   hclog.Logger
	// afterStep is GCConfig.AfterStep.
	afterStep func(ctx context.Context)

	// mu serialises Step and guards downSince.
	mu        sync.Mutex
	downSince map[string]time.Time

	cancel context.CancelFunc
	done   chan struct{}
}

// StartGC returns the GC of s and, when cfg.Interval is set, starts a
// goroutine that runs Step at that interval until Stop.
func StartGC(s *Store, cfg GCConfig) (*GC, error) {
	if cfg.Interval < 0 || cfg.Grace < 0 {
		return nil, catalog.FleetErrorf(catalog.ErrCatalogInvalid,
			"fleet: GC: Interval (%v) and Grace (%v) must not be negative; 0 means no GC run by itself and the default grace %v",
			cfg.Interval, cfg.Grace, DefaultGCGrace)
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &GC{s: s, grace: cmp.Or(cfg.Grace, DefaultGCGrace), log: log.Named("fleet-gc"),
		downSince: map[string]time.Time{}, afterStep: cfg.AfterStep, cancel: cancel, done: make(chan struct{})}
	if cfg.Interval == 0 {
		close(g.done)
		return g, nil
	}
	go g.run(ctx, cfg.Interval)
	return g, nil
}

func (g *GC) run(ctx context.Context, interval time.Duration) {
	defer close(g.done)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if _, err := g.Step(ctx, time.Now()); err != nil && ctx.Err() == nil {
				g.log.Warn("GC step failed; trying again at the next interval", "error", err)
			}
			if g.afterStep != nil {
				g.afterStep(ctx)
			}
		}
	}
}

// Stop stops the goroutine, if any, and waits for it.
func (g *GC) Stop() {
	g.cancel()
	<-g.done
}

// Step looks once, at time now: it notes the nodes that hold claims and
// are down, forgets those that are up again, and frees every claim of a
// node seen down since at least Grace before now. It returns the claims
// it freed, sorted.
func (g *GC) Step(ctx context.Context, now time.Time) ([]Freed, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	volumes, live, err := g.s.claimsAndNodes(ctx)
	if err != nil {
		return nil, err
	}
	down := map[string]bool{}
	for _, v := range volumes {
		for _, c := range v.AllClaims() {
			if !live[c.NodeID] {
				down[c.NodeID] = true
			}
		}
	}
	for node := range g.downSince {
		if !down[node] {
			delete(g.downSince, node)
		}
	}
	var freed []Freed
	for _, node := range slices.Sorted(maps.Keys(down)) {
		since, seen := g.downSince[node]
		if !seen {
			g.downSince[node] = now
			continue
		}
		if now.Sub(since) < g.grace {
			continue
		}
		for _, v := range volumes {
			out, err := g.freeNode(ctx, v, node, now.Sub(since))
			if err != nil {
				return freed, err
			}
			freed = append(freed, out...)
		}
	}
	return freed, nil
}

// freeNode frees every claim of node on v, unless node is up again.
func (g *GC) freeNode(ctx context.Context, v *model.CSIVolume, node string, down time.Duration) ([]Freed, error) {
	if !slices.ContainsFunc(v.AllClaims(), func(c *model.Claim) bool { return c.NodeID == node }) {
		return nil, nil
	}
	var freed []Freed
	nodeKey := g.s.keys.node(node)
	nodeGone := clientv3.Compare(clientv3.CreateRevision(nodeKey), "=", 0)
	_, err := g.s.update(ctx, "free the claims of a down node", v.Namespace, v.ID, func(v *model.CSIVolume) (*model.CSIVolume, error) {
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
		changed := v.Copy()
		for _, c := range v.AllClaims() {
			if c.NodeID == node && changed.GC(c.AllocID) {
				freed = append(freed, Freed{Namespace: v.Namespace, VolumeID: v.ID, AllocID: c.AllocID, NodeID: node})
			}
		}
		if len(freed) == 0 {
			return v, nil
		}
		return changed, nil
	}, func(context.Context, *model.CSIVolume) ([]clientv3.Cmp, error) { return []clientv3.Cmp{nodeGone}, nil })
	if err != nil {
		return nil, err
	}
	for _, f := range freed {
		g.log.Warn("freed the claim of a node down longer than the grace period", "namespace", f.Namespace, "volume", f.VolumeID,
			"alloc", f.AllocID, "node", f.NodeID, "down", down.Round(time.Second), "grace", g.grace)
	}
	return freed, nil
}

// Stranded is an attachment of a volume to a node that is down and holds
// no claim on it: no alloc there will unmount it, so the plugin's
// controller must detach it from another node.
type Stranded struct {
	Namespace, VolumeID, PluginID string
	Attachment                    *model.Attachment
}

// Stranded returns the attachments of down nodes that hold no claim, held
// or being released, on their volume, and those another node began to
// detach (MarkDetaching), sorted by volume, then node. A down node's claims
// are freed by GC once its grace is over; its attachments then show here.
func (s *Store) Stranded(ctx context.Context) ([]Stranded, error) {
	volumes, live, err := s.volumesAndNodes(ctx, func(v *model.CSIVolume) bool { return len(v.Attachments) > 0 })
	if err != nil {
		return nil, err
	}
	var out []Stranded
	for _, v := range volumes {
		for _, node := range slices.Sorted(maps.Keys(v.Attachments)) {
			detaching := v.Attachments[node].State == model.AttachmentStateDetaching
			if detaching || !live[node] && !slices.ContainsFunc(v.AllClaims(), func(c *model.Claim) bool { return c.NodeID == node }) {
				out = append(out, Stranded{Namespace: v.Namespace, VolumeID: v.ID, PluginID: v.PluginID, Attachment: v.Attachments[node]})
			}
		}
	}
	return out, nil
}

// claimsAndNodes reads, at one revision, the volumes with claims and the
// set of live nodes.
func (s *Store) claimsAndNodes(ctx context.Context) ([]*model.CSIVolume, map[string]bool, error) {
	return s.volumesAndNodes(ctx, func(v *model.CSIVolume) bool { return len(v.AllClaims()) > 0 })
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
