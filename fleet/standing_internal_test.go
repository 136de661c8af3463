package fleet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
)

// TestARenewalOnTheEtcdClientsCadenceKeepsTheLeaseHeld: the etcd client
// renews a lease a third of its TTL after the last answer, on a tick of
// half a second, so with the shortest TTL (2 s) a renewal on time comes a
// whole second after the last, half the TTL: the standing must stay held
// until a renewal is late, not flap to at risk before each one (health
// said degraded, and the fence refused new mounts, for an instant at
// every renewal). A lease not renewed for its whole TTL is still lost.
func TestARenewalOnTheEtcdClientsCadenceKeepsTheLeaseHeld(t *testing.T) {
	for _, ttl := range []time.Duration{MinLeaseTTL, 3 * time.Second, DefaultLeaseTTL} {
		s := &Store{cfg: Config{LeaseTTL: ttl}, lease: &lease{}}
		renewed := time.Now()
		s.lease.renewed.Store(&renewed)
		onTime := ttl/3 + keepAliveTick + 100*time.Millisecond // a round trip, on a loaded machine
		require.Equal(t, model.StandingHeld, s.Standing(renewed.Add(onTime)), "TTL %v, a renewal on time after %v", ttl, onTime)
		require.Equal(t, model.StandingAtRisk, s.Standing(renewed.Add(ttl-time.Millisecond)), "TTL %v", ttl)
		require.Equal(t, model.StandingLost, s.Standing(renewed.Add(ttl)), "TTL %v", ttl)
	}
}
