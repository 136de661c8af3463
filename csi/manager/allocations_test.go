package manager_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
)

// step is a registry operation on plugin "disk", then the health changes
// it must cause (in any order).
type step struct {
	op   func(t *testing.T, h *harness)
	want []*messages.CSIPluginHealthChanged
}

func register(alloc string, want ...*messages.CSIPluginHealthChanged) step {
	return step{func(t *testing.T, h *harness) {
		socket, _ := h.serve(t)
		h.register(t, csi.TypeNode, "disk", alloc, socket)
	}, want}
}

func deregister(alloc string, want ...*messages.CSIPluginHealthChanged) step {
	return step{func(t *testing.T, h *harness) { h.deregister(t, csi.TypeNode, "disk", alloc) }, want}
}

func TestManagerReplacesInstancesAsAllocationsComeAndGo(t *testing.T) {
	healthy := func(alloc string) *messages.CSIPluginHealthChanged { return nodeHealthy("disk", alloc) }
	stopped := func(alloc string) *messages.CSIPluginHealthChanged { return nodeStopped("disk", alloc) }
	cases := []struct {
		name    string
		steps   []step
		current string // the alloc listed at the end; "" for none
	}{
		{
			name:    "a newer alloc takes over from a healthy one",
			steps:   []step{register("a1", healthy("a1")), register("a2", stopped("a1"), healthy("a2"))},
			current: "a2",
		},
		{
			name:    "a newer alloc takes over before the old one was fingerprinted",
			steps:   []step{register("a1"), register("a2", stopped("a1"), healthy("a2"))},
			current: "a2",
		},
		{
			name: "the old alloc deregistering after a host restart changes nothing",
			steps: []step{
				register("a1", healthy("a1")), register("a2", stopped("a1"), healthy("a2")), deregister("a1"),
			},
			current: "a2",
		},
		{
			name: "the new alloc deregistering hands the plugin back to the old one",
			steps: []step{
				register("a1", healthy("a1")), register("a2"), deregister("a2", stopped("a1"), stopped("a2"), healthy("a1")),
			},
			current: "a1",
		},
		{
			name: "interleaved registrations and deregistrations settle on the newest alloc",
			steps: []step{
				register("a1"), register("a2"), deregister("a1"), register("a3"), deregister("a2", stopped("a1"), stopped("a2"), healthy("a3")),
			},
			current: "a3",
		},
		{
			name: "the last alloc deregistering stops the plugin",
			steps: []step{
				register("a1", healthy("a1")), register("a2", stopped("a1"), healthy("a2")), deregister("a1"), deregister("a2", stopped("a2")),
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := startManager(t, nil)
			for _, s := range tc.steps {
				s.op(t, h)
				awaitHealth(t, h.events, s.want...)
			}
			if tc.current == "" {
				requireListed(t, h.manager)
			} else {
				requireListed(t, h.manager, healthy(tc.current))
			}
			h.events.ExpectNone(t, quiet)
		})
	}
}

func TestManagerLeavesTheLiveInstanceAloneWhenAnotherAllocIsDeregistered(t *testing.T) {
	cases := []struct {
		name       string
		deregister func(t *testing.T, h *harness)
	}{
		{
			name: "an alloc the registry does not know",
			deregister: func(t *testing.T, h *harness) {
				require.ErrorIs(t, h.registry.DeregisterPlugin(csi.TypeNode, "disk", "nope"), registry.ErrNotFound)
			},
		},
		{
			name: "a stray event naming another alloc and the live one as current (Nomad's defect)",
			deregister: func(t *testing.T, h *harness) {
				live, ok := h.registry.Snapshot().Current(csi.TypeNode, "disk")
				require.True(t, ok)
				h.events.Send(h.manager.PID(), &messages.PluginDeregistered{
					Plugin:         pluginAt(csi.TypeNode, "disk", "nope", "/nope.sock"),
					Current:        live,
					CurrentChanged: true,
					Sequence:       h.registry.Snapshot().Sequence() + 1,
				})
			},
		},
		{
			name: "an older alloc that is not current",
			deregister: func(t *testing.T, h *harness) {
				h.deregister(t, csi.TypeNode, "disk", "a0")
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := startManager(t, nil)
			old, _ := h.serve(t)
			h.register(t, csi.TypeNode, "disk", "a0", old)
			socket, identity := h.serve(t)
			h.register(t, csi.TypeNode, "disk", "a1", socket)
			awaitHealth(t, h.events, nodeStopped("disk", "a0"), nodeHealthy("disk", "a1"))

			tc.deregister(t, h)
			h.events.ExpectNone(t, quiet)
			requireListed(t, h.manager, nodeHealthy("disk", "a1"))
			probes := identity.probes.Load()
			require.Eventually(t, func() bool { return identity.probes.Load() > probes+2 }, wait, 10*time.Millisecond,
				"the live instance goes on fingerprinting")
		})
	}
}

func TestManagerReplacesTheInstanceWhenTheCurrentAllocChangesItsSocket(t *testing.T) {
	h := startManager(t, nil)
	identity := takeOver(t, h, "a1", "a1")
	require.Equal(t, "a1", finalAndHealth(t, h, "a1", nodeHealthy("disk", "a1")).GetReplacedBy(), "the old instance's final word says the alloc's new instance took over")
	awaitHealth(t, h.events, nodeStopped("disk", "a1"))
	require.Positive(t, identity.probes.Load(), "the new instance fingerprints the new socket")
	requireListed(t, h.manager, nodeHealthy("disk", "a1"))
	h.events.ExpectNone(t, quiet)
}
