package fleet

import (
	"sync"
	"time"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
)

// Standing is this node's standing in the fleet at now, from the age of
// its lease's last renewal: held within LeaseTTL/2 plus keepAliveTick,
// at risk after that, lost after a whole LeaseTTL (the lease may have
// expired: etcd counts it from its own last renewal, which came before
// this node heard of it). A new lease, granted once etcd answers again,
// makes it held again. While the node's watch (WatchNode) runs, its
// last answer from etcd counts the same way: a change of the node's
// claims may be waiting unheard. While another agent holds this node's ID
// (IdentityLost), it is lost.
//
// The tick is there because the etcd client renews a lease a third of
// its TTL after the last answer, at its next tick (keepAliveTick): with
// a 2 s TTL, a renewal on time comes a whole second, half the TTL, after
// the last one, which must not count as late.
func (s *Store) Standing(now time.Time) model.Standing {
	if s.lost.lost() != "" {
		return model.StandingLost
	}
	since := max(now.Sub(*s.lease.renewed.Load()), s.watchAge(now))
	switch ttl := s.cfg.LeaseTTL; {
	case since >= ttl:
		return model.StandingLost
	case since >= ttl/2+keepAliveTick:
		return model.StandingAtRisk
	}
	return model.StandingHeld
}

// WatchStanding calls fn with this node's standing, first as it is, then
// each time it changes, checked every LeaseTTL/20 on a goroutine of its
// own, until stop. stop waits for that goroutine: fn is not called after
// it returns. fn must not block for long: a late check fences late.
func (s *Store) WatchStanding(fn func(model.Standing)) (stop func()) {
	done, quit := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(s.cfg.LeaseTTL / 20)
		defer tick.Stop()
		last := model.Standing(-1)
		for {
			if now := s.Standing(time.Now()); now != last {
				last = now
				fn(now)
			}
			select {
			case <-quit:
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(quit) })
		<-done
	}
}

// keepAliveTick is how often the etcd client looks for leases due for a
// renewal (clientv3's retryConnWait): it renews a lease a third of its
// TTL after the last answer, at its next tick.
const keepAliveTick = 500 * time.Millisecond
