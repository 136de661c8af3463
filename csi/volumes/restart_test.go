package volumes_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/volumes"
)

// TestAnAgentKilledAtAnyStepRecoversAtRestart kills the agent (closes its
// store under the running volume manager) while the strict plugin holds
// one RPC of a mount or an unmount, before or after doing its work, then
// starts a new volume manager on the same file. After its reconcile, and
// an unmount, nothing is left mounted, staged or attached, the claim is
// freed, and no NodeUnstageVolume was ever sent while a publish was live.
func TestAnAgentKilledAtAnyStepRecoversAtRestart(t *testing.T) {
	type point struct {
		method string
		after  bool
	}
	mountSteps := []string{"ControllerPublishVolume", "NodeStageVolume", "NodePublishVolume"}
	unmountSteps := []string{"NodeUnpublishVolume", "NodeUnstageVolume", "ControllerUnpublishVolume"}
	for _, unmount := range []bool{false, true} {
		steps := mountSteps
		if unmount {
			steps = unmountSteps
		}
		for _, step := range steps {
			for _, after := range []bool{false, true} {
				name := map[bool]string{false: "mount", true: "unmount"}[unmount] + " killed " +
					map[bool]string{false: "before ", true: "after "}[after] + step
				t.Run(name, func(t *testing.T) { killedAt(t, unmount, point{step, after}.method, after) })
			}
		}
	}
	t.Run("killed after a finished mount", func(t *testing.T) { killedAt(t, false, "", false) })
}

func killedAt(t *testing.T, unmount bool, method string, after bool) {
	n := newNode(t, nil)
	p := newStrictPlugin(t, n, "hp")
	p.create(n, "vol", "hp", model.AccessModeSingleNodeWriter)

	if unmount {
		_, err := n.manager.Mount(ctx, "", "vol", "web-1", false)
		require.NoError(t, err)
	}
	if method == "" {
		_, err := n.manager.Mount(ctx, "", "vol", "web-1", false)
		require.NoError(t, err)
		n.crash(nil)
	} else {
		f := p.hang(method, after)
		done := make(chan error, 1)
		go func() {
			if unmount {
				done <- n.manager.Unmount(ctx, "", "vol", "web-1")
			} else {
				_, err := n.manager.Mount(ctx, "", "vol", "web-1", false)
				done <- err
			}
		}()
		<-f.reached
		n.crash(f.free)
		require.Error(t, <-done, "the killed operation did not succeed")
	}

	st := n.settle("vol")
	if method == "" {
		require.Equal(t, "published", st.Record.GetPublishes()["web-1"].GetState(), "a finished mount stays mounted across the restart")
		require.NoError(t, n.manager.Unmount(ctx, "", "vol", "web-1"), "unmount works after the restart")
	} else {
		require.Nil(t, st.Record, "the reconcile at start rolled back, or finished, the killed operation")
		require.Equal(t, "reconcile", st.LastOperation)
		require.ErrorIs(t, n.manager.Unmount(ctx, "", "vol", "web-1"), volumes.ErrNotMounted)
	}
	require.Nil(t, n.status("vol").Record)
	attached, published, violations := p.state()
	require.Empty(t, violations, "no NodeUnstageVolume while a publish is live")
	require.Empty(t, attached, "nothing is left attached")
	require.Empty(t, published, "nothing is left published")
	require.Empty(t, mountsUnder(t, n.root), "nothing is left mounted")
	writers, readers, past := n.catalog.claims("vol")
	require.Empty(t, append(writers, readers...), "the claim is freed")
	require.Empty(t, past)
}

// TestAWriterKilledWhileUnmountingLeavesTheReaderMounted mounts a writer
// and a reader, kills the agent after the writer's NodeUnpublishVolume,
// and restarts: the reader stays published and staged (no unstage while it
// is live), and its own unmount then unstages and detaches.
func TestAWriterKilledWhileUnmountingLeavesTheReaderMounted(t *testing.T) {
	n := newNode(t, nil)
	p := newStrictPlugin(t, n, "hp")
	p.create(n, "vol", "hp", model.AccessModeSingleNodeWriter)
	_, err := n.manager.Mount(ctx, "", "vol", "writer", false)
	require.NoError(t, err)
	reader, err := n.manager.Mount(ctx, "", "vol", "reader", true)
	require.NoError(t, err)

	f := p.hang("NodeUnpublishVolume", true)
	done := make(chan error, 1)
	go func() { done <- n.manager.Unmount(ctx, "", "vol", "writer") }()
	<-f.reached
	n.crash(f.free)
	require.Error(t, <-done)

	st := n.settle("vol")
	require.NotContains(t, st.Record.GetPublishes(), "writer", "the restart finished the writer's unmount")
	require.Equal(t, "published", st.Record.GetPublishes()["reader"].GetState())
	require.Equal(t, "staged", st.Record.GetStage().GetState())
	require.Equal(t, []string{reader.TargetPath}, mountsUnder(t, n.root+"/hp/per-alloc"))
	writers, readers, _ := n.catalog.claims("vol")
	require.Empty(t, writers)
	require.Equal(t, []string{"reader"}, readers)

	require.NoError(t, n.manager.Unmount(ctx, "", "vol", "reader"))
	attached, published, violations := p.state()
	require.Empty(t, violations)
	require.Empty(t, attached)
	require.Empty(t, published)
	require.Empty(t, mountsUnder(t, n.root))
}
