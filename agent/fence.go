package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/fleet"
)

// DefaultFenceMargin is ClusterConfig.FenceMargin's default.
const DefaultFenceMargin = 5 * time.Second

// checkFence refuses a cluster config whose GC could free a node's claims
// before that node has fenced its mounts: a node cut off from etcd fences
// once it has not renewed its lease for LeaseTTL, and needs FenceMargin to
// finish, so the GC's grace must be longer than both together.
func checkFence(c *ClusterConfig) error {
	ttl, grace, margin := c.LeaseTTL, c.GCGrace, c.FenceMargin
	if ttl == 0 {
		ttl = fleet.DefaultLeaseTTL
	}
	if grace == 0 {
		grace = fleet.DefaultGCGrace
	}
	if margin == 0 {
		margin = DefaultFenceMargin
	}
	switch {
	case margin < 0:
		return fmt.Errorf("%w: Cluster.FenceMargin (-cluster-fence-margin) is %v; give a positive duration, or 0 for the default %v",
			ErrInvalidConfig, margin, DefaultFenceMargin)
	case grace <= ttl+margin:
		return fmt.Errorf("%w: the GC's grace (-cluster-gc-grace %v) must be longer than the lease TTL (-cluster-lease-ttl %v) plus the fence margin (-cluster-fence-margin %v): "+
			"a node cut off from etcd makes its writers read-only once it has not renewed its lease for the TTL, and the GC must not give its volumes to another node before that is done; "+
			"give -cluster-gc-grace %v or more, or a shorter -cluster-lease-ttl", ErrInvalidConfig, grace, ttl, margin, ttl+margin+time.Second)
	}
	return nil
}

// followStanding, in cluster mode, tells the volume manager each change of
// this node's standing in the fleet, so that it fences its writers when
// the node's lease may be lost (see volumes.Manager.SetStanding). It stops
// before the volume manager does: a shutdown fences nothing.
func (a *Agent) followStanding() {
	if a.member == nil {
		return
	}
	stop := a.member.Store().WatchStanding(a.volumes.SetStanding)
	a.stops = append(a.stops, func(context.Context) error { stop(); return nil })
}

// followClaims, in cluster mode, starts this node's watch of its claims in
// the fleet (fleet.Store.WatchNode) before the volume manager starts, so
// that no change after the manager's first reconciles read the fleet goes
// unheard; what it hears before the manager runs waits in the returned
// forwarder, which startManagers points at the manager.
func (a *Agent) followClaims() *claimsForwarder {
	f := &claimsForwarder{}
	if a.member == nil {
		return f
	}
	stop := a.member.Store().WatchNode(fleet.NodeWatchConfig{Claims: f.claims, Resync: f.resync})
	a.stops = append(a.stops, func(context.Context) error { stop(); return nil })
	return f
}

// claimsForwarder hands the node watch's news to the volume manager once
// it runs, in order, keeping what came before.
type claimsForwarder struct {
	mu      sync.Mutex
	to      *volumes.Manager
	waiting []func(*volumes.Manager)
}

func (f *claimsForwarder) claims(c model.NodeClaims) {
	f.send(func(m *volumes.Manager) { m.ClaimsChanged(c) })
}

func (f *claimsForwarder) resync(reason string) {
	f.send(func(m *volumes.Manager) { m.Resync(reason) })
}

func (f *claimsForwarder) send(deliver func(*volumes.Manager)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.to == nil {
		f.waiting = append(f.waiting, deliver)
		return
	}
	deliver(f.to)
}

// deliverTo makes m the recipient, and hands it what waited.
func (f *claimsForwarder) deliverTo(m *volumes.Manager) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.to = m
	for _, deliver := range f.waiting {
		deliver(m)
	}
	f.waiting = nil
}

// onEvent logs and counts what became of a mount when this node's standing
// in the fleet changed (volumes.Config.OnEvent).
func (a *Agent) onEvent(ev volumes.Event) {
	a.metrics.fences.WithLabelValues(string(ev.Kind)).Inc()
	args := []any{"kind", ev.Kind, "namespace", ev.Namespace, "volume", ev.VolumeID, "alloc", ev.AllocID,
		"target_path", ev.TargetPath, "read_only", ev.ReadOnly, "detail", ev.Detail}
	switch ev.Kind {
	case volumes.EventConditionNormal:
		a.log.Info("the node plugin reports the volume normal again", args...)
	case volumes.EventConditionAbnormal:
		a.log.Warn("the node plugin reports the volume abnormal", args...)
	case volumes.EventClaimRestored:
		a.log.Info("mount fence lifted: the claim is still this node's", args...)
	case volumes.EventFenceFailed, volumes.EventClaimGone:
		a.log.Error("mount fence: the alloc must stop using this volume", args...)
	default:
		a.log.Warn("mount fence: the alloc's claim is not vouched for", args...)
	}
}
