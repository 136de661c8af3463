package manager_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/messages"
)

// finalOf waits for the final fingerprint of alloc's instance of "disk",
// skipping every other event.
func finalOf(t *testing.T, h *harness, alloc string) *messages.CSIFingerprint {
	t.Helper()
	deadline := time.Now().Add(wait)
	for time.Until(deadline) > 0 {
		fp, ok := h.events.Next(t, time.Until(deadline)).Message.(*messages.CSIPluginFingerprinted)
		if ok && fp.GetFingerprint().GetAllocId() == alloc && fp.GetFingerprint().GetHealthDescription() == csi.StoppedDescription {
			return fp.GetFingerprint()
		}
	}
	t.Fatalf("no final fingerprint of alloc %s", alloc)
	return nil
}

// takeOver registers alloc from of "disk" on a socket of its own, waits
// until it is healthy, then registers alloc to on another: both served
// all along. It returns the second socket's identity server.
func takeOver(t *testing.T, h *harness, from, to string) *healthyIdentity {
	t.Helper()
	first, _ := h.serve(t)
	h.register(t, csi.TypeNode, "disk", from, first)
	awaitHealth(t, h.events, nodeHealthy("disk", from))
	second, identity := h.serve(t)
	h.register(t, csi.TypeNode, "disk", to, second)
	return identity
}

// finalAndHealth waits both for the final fingerprint of alloc's instance
// of "disk" and for the health change want, which two actors send, in
// either order, skipping every other event.
func finalAndHealth(t *testing.T, h *harness, alloc string, want *messages.CSIPluginHealthChanged) *messages.CSIFingerprint {
	t.Helper()
	var final *messages.CSIFingerprint
	seen := false
	for deadline := time.Now().Add(wait); final == nil || !seen; {
		if time.Until(deadline) <= 0 {
			t.Fatalf("final fingerprint of alloc %s: %v; %v: %v", alloc, final != nil, want, seen)
		}
		switch msg := h.events.Next(t, time.Until(deadline)).Message.(type) {
		case *messages.CSIPluginFingerprinted:
			if fp := msg.GetFingerprint(); fp.GetAllocId() == alloc && fp.GetHealthDescription() == csi.StoppedDescription {
				final = fp
			}
		case *messages.CSIPluginHealthChanged:
			seen = seen || proto.Equal(msg, want)
		}
	}
	return final
}

func TestTheFinalFingerprintOfAReplacedInstanceNamesTheAllocationThatTookOver(t *testing.T) {
	h := startManager(t, nil)
	for _, s := range []step{register("a1", nodeHealthy("disk", "a1")), register("a2", nodeHealthy("disk", "a2"))} {
		s.op(t, h)
		awaitHealth(t, h.events, s.want...)
	}
	// awaitHealth skipped a1's final fingerprint: a2 took over from it.
	h.deregister(t, csi.TypeNode, "disk", "a2")
	final := finalAndHealth(t, h, "a2", nodeHealthy("disk", "a1"))
	require.Equal(t, "a1", final.GetReplacedBy(), "a2 deregistered hands the plugin back to a1")
	for _, fp := range h.manager.Plugins() {
		require.Empty(t, fp.GetReplacedBy(), "the list (GET /v1/csi/plugins) holds current instances only: replaced_by is never set there")
	}

	h.deregister(t, csi.TypeNode, "disk", "a1")
	require.Empty(t, finalOf(t, h, "a1").GetReplacedBy(), "the last alloc deregistered: nobody takes over")
}

func TestTheFinalFingerprintOfAnInstanceANewerAllocationReplacedNamesIt(t *testing.T) {
	h := startManager(t, nil)
	register("a1", nodeHealthy("disk", "a1")).op(t, h)
	awaitHealth(t, h.events, nodeHealthy("disk", "a1"))
	register("a2").op(t, h)
	require.Equal(t, "a2", finalOf(t, h, "a1").GetReplacedBy())
}

// TestAReplacedInstancesFinalWordComesAfterTheNewInstancesFirst: when a
// newer allocation takes over a healthy plugin, the old instance's final
// fingerprint ("stopped", replaced by the new allocation) is published
// after the new instance's first, so that no subscriber (the catalog,
// which schedules claims) hears of the node without a healthy instance of
// a plugin that was served all along.
func TestAReplacedInstancesFinalWordComesAfterTheNewInstancesFirst(t *testing.T) {
	h := startManager(t, nil)
	takeOver(t, h, "a1", "a2")
	var heard []string
	for deadline := time.Now().Add(wait); !slices.Contains(heard, "a1 stopped"); {
		require.Positive(t, time.Until(deadline), "no final word of a1; heard %v", heard)
		msg, ok := h.events.Next(t, time.Until(deadline)).Message.(*messages.CSIPluginFingerprinted)
		if !ok {
			continue
		}
		switch fp := msg.GetFingerprint(); {
		case fp.GetAllocId() == "a2" && fp.GetHealthy():
			heard = append(heard, "a2 healthy")
		case fp.GetAllocId() == "a1" && fp.GetHealthDescription() == csi.StoppedDescription:
			require.Equal(t, "a2", fp.GetReplacedBy())
			heard = append(heard, "a1 stopped")
		}
	}
	require.Equal(t, []string{"a2 healthy", "a1 stopped"}, heard)
}
