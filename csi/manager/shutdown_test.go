package manager_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/plugintype"
	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/manager"
	"github.com/plugvisor/plugvisor/messages"
)

func TestManagerShutdownPushesUnhealthyFingerprints(t *testing.T) {
	h := startManager(t, nil)
	for _, name := range []string{"a", "b", "c"} {
		socket, _ := h.serve(t)
		h.register(t, csi.TypeNode, name, "a1", socket)
	}
	awaitHealth(t, h.events, nodeHealthy("a", "a1"), nodeHealthy("b", "a1"), nodeHealthy("c", "a1"))
	h.events.Watch(t, h.manager.PID())

	require.NoError(t, h.shutdown(context.Background()))
	// The manager's Terminated is a system message, which its watcher may
	// take before the fingerprints the manager sent it first: the two are
	// awaited in any order.
	missing := []*messages.CSIPluginHealthChanged{nodeStopped("a", "a1"), nodeStopped("b", "a1"), nodeStopped("c", "a1")}
	terminated := false
	for deadline := time.Now().Add(wait); len(missing) > 0 || !terminated; {
		require.Positive(t, time.Until(deadline), "still waiting for %v, or the manager's Terminated (%v)", missing, terminated)
		switch msg := h.events.Next(t, time.Until(deadline)).Message.(type) {
		case *actor.Terminated:
			require.True(t, msg.Who.Equal(h.manager.PID()), "the Terminated of %s", msg.Who)
			terminated = true
		case *messages.CSIPluginHealthChanged:
			if i := indexOf(missing, msg); i >= 0 {
				missing = append(missing[:i], missing[i+1:]...)
			}
		}
	}
	require.NoError(t, h.manager.Shutdown(context.Background()), "a second shutdown returns the first one's result")
}

// The agent stops the instances first, so that the catalog can take in
// their final fingerprints and stop before the manager it subscribes to.
func TestManagerStopInstancesLeavesTheManagerAnsweringAndStartingNothing(t *testing.T) {
	h := startManager(t, nil)
	socket, _ := h.serve(t)
	h.register(t, csi.TypeNode, "a", "a1", socket)
	awaitHealth(t, h.events, nodeHealthy("a", "a1"))

	require.NoError(t, h.manager.StopInstances(context.Background()))
	awaitHealth(t, h.events, nodeStopped("a", "a1"))
	require.Empty(t, h.manager.Plugins())

	late, _ := h.serve(t)
	h.register(t, csi.TypeNode, "late", "a1", late)
	h.events.Send(h.manager.PID(), &plugintype.Resync{})
	list := probe.Ask[*messages.ListCSIPluginsResponse](t, h.events, h.manager.PID(), &messages.ListCSIPluginsRequest{}, wait)
	require.Empty(t, list.GetPlugins(), "the manager still answers")
	h.events.ExpectNone(t, 300*time.Millisecond) // no instance fingerprints the late plugin

	h.events.Watch(t, h.manager.PID())
	require.NoError(t, h.shutdown(context.Background()))
	h.events.ExpectTerminated(t, h.manager.PID(), wait)
}

func TestManagerShutdownNamesTheInstancesThatDidNotStop(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	var stuck string
	var shutdownErr error
	h := startManager(t, func(c *manager.Config) {
		c.Fingerprint.Dial = func(ctx context.Context, path string, opts csi.Options) (manager.Plugin, error) {
			if path == stuck {
				entered <- struct{}{}
				<-release // ignores ctx, as a broken plugin client might
				return nil, errors.New("released")
			}
			return manager.DialPlugin(ctx, path, opts)
		}
	})
	t.Cleanup(func() { // before the harness's cleanups: they shut the manager down
		close(release)
		require.ErrorContains(t, shutdownErr, "did not stop")
	})
	stuck, _ = h.serve(t)
	h.register(t, csi.TypeNode, "stuck", "a1", stuck)
	fine, _ := h.serve(t)
	h.register(t, csi.TypeNode, "fine", "a1", fine)
	awaitHealth(t, h.events, nodeHealthy("fine", "a1"))
	<-entered

	// The manager gets 9/10 of the time; the tenth left (300 ms) carries
	// its answer back on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	shutdownErr = h.shutdown(ctx)
	require.ErrorContains(t, shutdownErr, "1 plugin instances did not stop")
	require.ErrorContains(t, shutdownErr, "csi-node/stuck (alloc a1)")
	require.NotContains(t, shutdownErr.Error(), "fine")
	awaitHealth(t, h.events, nodeStopped("fine", "a1"))
}
