package manager_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/plugintype"
	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/manager"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/supervisor"
	"github.com/plugvisor/plugvisor/supervisor/supervisortest"
)

// supervisionCounts is a manager.Metrics that counts, by plugin name.
type supervisionCounts struct {
	mu                 sync.Mutex
	restarting, gaveUp map[string]int
}

func (s *supervisionCounts) InstanceRestarting(p *messages.PluginInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.restarting[p.GetName()]++
}

func (s *supervisionCounts) InstanceGaveUp(p *messages.PluginInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gaveUp[p.GetName()]++
}

func TestManagerRestartsAPanickingInstanceWithBackoffAndGivesUp(t *testing.T) {
	clock := supervisortest.NewFakeClock(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	var flaky string
	counts := &supervisionCounts{restarting: map[string]int{}, gaveUp: map[string]int{}}
	h := startManager(t, func(c *manager.Config) {
		c.Metrics = counts
		c.Clock = clock
		c.Supervision = supervisor.Spec{MaxRestarts: 2, Within: time.Minute, InitialDelay: time.Second, Multiplier: 2}
		c.Fingerprint.Dial = func(ctx context.Context, path string, opts csi.Options) (manager.Plugin, error) {
			if path == flaky {
				panic("boom")
			}
			return manager.DialPlugin(ctx, path, opts)
		}
	})
	flaky, _ = h.serve(t)
	h.register(t, csi.TypeNode, "flaky", "a1", flaky)
	reason := `csi: fingerprint of csi-node "flaky" (alloc a1) panicked: boom`
	expectDescription := func(want string) {
		t.Helper()
		fp := probe.Expect[*messages.CSIPluginFingerprinted](t, h.events, wait).GetFingerprint()
		require.Equal(t, "a1", fp.GetAllocId())
		require.False(t, fp.GetHealthy())
		require.Equal(t, want, fp.GetHealthDescription())
	}

	restarting := "plugin instance failed (" + reason + "): restarting in 1s"
	expectDescription(restarting)
	h.events.ExpectMessages(t, wait, health(csi.TypeNode, "flaky", "a1", false, restarting))
	clock.Advance(time.Second - time.Nanosecond)
	h.events.ExpectNone(t, quiet)
	clock.Advance(time.Nanosecond)
	expectDescription("plugin instance failed (" + reason + "): restarting in 2s")
	clock.Advance(2 * time.Second)
	gaveUp := reason + " (gave up after 2 restarts)"
	expectDescription("plugin instance failed: " + gaveUp)
	h.events.ExpectMessages(t, wait, &messages.CSIPluginFailed{Type: csi.TypeNode, Name: "flaky", AllocId: "a1", Reason: gaveUp, Restarts: 2})
	expectDescription(csi.StoppedDescription)
	counts.mu.Lock()
	require.Equal(t, 2, counts.restarting["flaky"], "the metrics hook heard of both restarts")
	require.Equal(t, 1, counts.gaveUp["flaky"])
	counts.mu.Unlock()
	requireListed(t, h.manager, health(csi.TypeNode, "flaky", "a1", false, "plugin instance failed: "+gaveUp))

	clock.Advance(time.Hour)
	h.events.Send(h.manager.PID(), &plugintype.Resync{})
	h.events.ExpectNone(t, quiet)

	good, _ := h.serve(t)
	h.register(t, csi.TypeNode, "flaky", "a2", good)
	awaitHealth(t, h.events, nodeHealthy("flaky", "a2"))
	requireListed(t, h.manager, nodeHealthy("flaky", "a2"))
}
