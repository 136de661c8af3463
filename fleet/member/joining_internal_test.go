package member

import (
	"context"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
)

// TestARouterWaitsForAnIncarnationThatHasStarted: while the member joins
// (again), its new incarnation's cluster has no identity lookup until
// protoactor's StartMember sets one, and a request sent through it
// crashed the process. Until an incarnation has started, the Router sends
// nothing: a change waits, and is unavailable when its time is up; the
// member's other views answer as for a member with no grains.
func TestARouterWaitsForAnIncarnationThatHasStarted(t *testing.T) {
	cfg := Config{Fleet: fleet.Config{Endpoints: []string{"http://127.0.0.1:1"}, NodeID: "n1"}, Address: "127.0.0.1:0"}.withDefaults()
	m := &Member{cfg: cfg, log: cfg.Fleet.Logger}
	m.quit, m.cancel = context.WithCancel(context.Background())
	m.router = newRouter(m)
	m.topology.Store(&[]*cluster.Member{})
	m.changed.Store(new(make(chan struct{})))
	inc := m.newIncarnation() // built, never started: as a rejoin has it while protoactor starts it
	defer inc.system.Shutdown()
	m.latest.Store(inc)

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := m.router.Claim(ctx, "", "vol", &model.Claim{AllocID: "a1", NodeID: "n1", Mode: model.ClaimModeWrite, State: model.ClaimStateTaken})
	require.ErrorIs(t, err, model.ErrFleetUnavailable)
	require.Contains(t, err.Error(), "joining the cluster")
	require.Empty(t, m.router.Owner("", "vol"))
	require.Zero(t, m.Grains())
}
