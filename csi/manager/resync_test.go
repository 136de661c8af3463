package manager_test

import (
	"testing"
	"time"

	"github.com/plugvisor/plugvisor/actors/plugintype"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/manager"
	"github.com/plugvisor/plugvisor/messages"
)

func TestManagerResyncStopsExtraInstancesAndStartsMissingOnes(t *testing.T) {
	h := startManager(t, nil)
	socket, _ := h.serve(t)
	h.register(t, csi.TypeNode, "extra", "a1", socket)
	awaitHealth(t, h.events, nodeHealthy("extra", "a1"))
	h.events.Send(h.manager.PID(), &plugintype.Resync{})
	h.events.ExpectNone(t, quiet) // nothing to correct

	// The manager misses the next events, as if they had been lost.
	h.events.Send(h.registry.PID(), &messages.Unsubscribe{Type: csi.TypeNode, Subscriber: h.manager.PID()})
	socket, _ = h.serve(t)
	h.register(t, csi.TypeNode, "missing", "a2", socket)
	h.deregister(t, csi.TypeNode, "extra", "a1")
	h.events.ExpectNone(t, quiet)
	requireListed(t, h.manager, nodeHealthy("extra", "a1"))

	h.events.Send(h.manager.PID(), &plugintype.Resync{})
	awaitHealth(t, h.events, nodeStopped("extra", "a1"), nodeHealthy("missing", "a2"))
	requireListed(t, h.manager, nodeHealthy("missing", "a2"))
	h.events.ExpectNone(t, quiet)
}

func TestManagerResyncsOnItsTimer(t *testing.T) {
	h := startManager(t, func(c *manager.Config) { c.ResyncInterval = 20 * time.Millisecond })
	h.events.Send(h.registry.PID(), &messages.Unsubscribe{Type: csi.TypeNode, Subscriber: h.manager.PID()})
	socket, _ := h.serve(t)
	h.register(t, csi.TypeNode, "missing", "a1", socket)
	awaitHealth(t, h.events, nodeHealthy("missing", "a1"))
}
