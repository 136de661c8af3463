package volumes_test

import (
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/volumes"
)

// TestAVolumeManagerThatPanicsKeepsItsQueuesAndChecksEveryVolumeAgain
// panics the volume manager's actor while it announces a change of the
// node's standing (an embedder's OnEvent that panics, on the actor's
// goroutine) with mounts queued behind it: protoactor restarts the actor,
// the same instance, so the queued mounts and the published volume are
// its own still; every volume is reconciled again, since the message the
// panic dropped may have been a change a volume needed; and the manager
// goes on serving: the queued mounts answer, and unmounts work.
func TestAVolumeManagerThatPanicsKeepsItsQueuesAndChecksEveryVolumeAgain(t *testing.T) {
	var panicked atomic.Bool
	logs := &probe.LogBuffer{}
	n := newNode(t, func(c *volumes.Config) {
		c.NodeID = "n1"
		c.Logger = hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info})
		c.OnEvent = func(ev volumes.Event) {
			if ev.Kind == volumes.EventClaimAtRisk && panicked.CompareAndSwap(false, true) {
				panic("an embedder's OnEvent that panics")
			}
		}
	})
	p := newStrictPlugin(t, n, "hp")
	for _, id := range []string{"db", "logs", "cache"} {
		p.create(n, id, "hp", model.AccessModeSingleNodeWriter)
	}
	n.mount("db", "a1")

	done := make(chan error, 2)
	for _, id := range []string{"logs", "cache"} {
		go func() {
			_, err := n.manager.Mount(ctx, "", id, "a-"+id, false)
			done <- err
		}()
	}
	n.manager.SetStanding(model.StandingAtRisk)
	n.manager.SetStanding(model.StandingHeld)
	for range 2 {
		require.NoError(t, <-done, "a mount queued around the panic")
	}
	require.True(t, panicked.Load())
	require.Contains(t, logs.String(), "the volume manager restarted after a panic: checking every volume again")
	st := n.settle("db")
	require.Equal(t, "reconcile", st.LastOperation, "the published volume was checked again")
	require.Contains(t, st.Record.GetPublishes(), "a1")
	for _, id := range []string{"db", "logs", "cache"} {
		alloc := map[string]string{"db": "a1", "logs": "a-logs", "cache": "a-cache"}[id]
		require.NoError(t, n.manager.Unmount(ctx, "", id, alloc))
	}
	require.Empty(t, mountsUnder(t, n.root))
}
