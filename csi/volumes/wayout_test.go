package volumes_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"go.uber.org/mock/gomock"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/csitest"
	"github.com/plugvisor/plugvisor/csi/volumes"
)

// TestTheWayOutRefusesASocketThatServesAnotherPluginAndForceCleansUp is
// issue 41's fourth recipe: a volume mounted through the plugin named
// "hostpath", whose socket another plugin ("hp3.csi.k8s.io") then serves.
// The unmount sends that plugin nothing but GetPluginInfo (any other RPC
// fails the test), fails with ErrPluginChanged naming both plugins, keeps
// the mount, and tells the volume's event subscribers; an unmount with
// force then cleans up this node, and the detach waits for the plugin
// that attached.
func TestTheWayOutRefusesASocketThatServesAnotherPluginAndForceCleansUp(t *testing.T) {
	n := newNode(t, nil)
	p := newStrictPlugin(t, n, "hp")
	p.create(n, "vol", "hp", model.AccessModeSingleNodeWriter)
	res, err := n.manager.Mount(ctx, "", "vol", "web-1", false)
	require.NoError(t, err)
	require.Equal(t, "hostpath", n.status("vol").Record.GetPluginName(), "the record keeps the name of the plugin of the way in")
	events, cancel := n.manager.SubscribeVolumeEvents()
	defer cancel()

	p.stop()
	other := csitest.NewMocks(t)
	other.Identity.EXPECT().GetPluginInfo(gomock.Any(), gomock.Any()).
		Return(&csipb.GetPluginInfoResponse{Name: "hp3.csi.k8s.io", VendorVersion: "1"}, nil).AnyTimes()
	impostor := csitest.Serve(t, p.socket, other.Services())

	err = n.manager.Unmount(ctx, "", "vol", "web-1")
	require.ErrorIs(t, err, volumes.ErrPluginChanged)
	require.ErrorContains(t, err, `the socket `+p.socket+` now serves plugin "hp3.csi.k8s.io", and volume default/vol was mounted through plugin "hostpath"`)
	require.ErrorContains(t, err, "unmount with force")
	require.Contains(t, mountsUnder(t, n.root), res.TargetPath, "the mount is kept")
	select {
	case ev := <-events:
		require.Equal(t, volumes.EventPluginChanged, ev.Kind)
		require.Equal(t, "web-1", ev.AllocID)
		require.Contains(t, ev.Detail, `"hp3.csi.k8s.io"`)
	case <-time.After(wait):
		t.Fatal("no volume event")
	}

	require.NoError(t, n.manager.ForceUnmount(ctx, "", "vol", "web-1"))
	require.Empty(t, mountsUnder(t, n.root), "force unmounted the target and the staging path")
	rec := n.status("vol").Record
	require.Empty(t, rec.GetPublishes())
	require.Nil(t, rec.GetStage())
	require.NotNil(t, rec.GetAttachment(), "the detach waits for the plugin that attached")
	n.requireNoWriter("vol")

	impostor.Stop()
	p.serve()
	n.register(volumes.ControllerPluginType, "hp", "a2", p.socket)
	require.Eventually(t, func() bool { return n.status("vol").Record == nil }, wait, 10*time.Millisecond,
		"the plugin that attached is back: the detach went through")
}

// TestTheWayOutAsksThePluginItsNameBeforeEachStep unmounts a volume
// mounted on the strict plugin: each step of the way out (NodeUnpublish,
// NodeUnstage, ControllerUnpublish) follows a GetPluginInfo of its own, on
// the connection the step then takes. A name taken from the connection's
// cache would be the name of a plugin stopped a moment ago whose
// transport the client has not yet seen end, and the step would reach the
// plugin that took its socket.
func TestTheWayOutAsksThePluginItsNameBeforeEachStep(t *testing.T) {
	n, p, _ := mountedOnStrict(t)
	p.mu.Lock()
	before := len(p.calls)
	p.mu.Unlock()

	require.NoError(t, n.manager.Unmount(ctx, "", "vol", "web-1"))

	p.mu.Lock()
	after := slices.Clone(p.calls[before:])
	p.mu.Unlock()
	for _, step := range []string{"NodeUnpublishVolume", "NodeUnstageVolume", "ControllerUnpublishVolume"} {
		i := slices.Index(after, step)
		require.Positive(t, i, "%s was sent, after a GetPluginInfo: %v", step, after)
		require.Equal(t, "GetPluginInfo", after[i-1], "%s follows a GetPluginInfo: %v", step, after)
	}
}

// TestAPublishAgainGoesOnlyToThePluginTheVolumeWasMountedThrough unmounts
// a published target behind the agent's back while it is down, and starts
// it with another plugin ("hp3.csi.k8s.io") at the socket: the reconcile
// does not stage or publish the volume through it (the way out would then
// refuse that plugin for good), and says so in an event.
func TestAPublishAgainGoesOnlyToThePluginTheVolumeWasMountedThrough(t *testing.T) {
	n, p, res := lostWhileDown(t)
	p.stop()
	other := csitest.NewMocks(t)
	other.Identity.EXPECT().GetPluginInfo(gomock.Any(), gomock.Any()).
		Return(&csipb.GetPluginInfoResponse{Name: "hp3.csi.k8s.io", VendorVersion: "1"}, nil).AnyTimes()
	other.Node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).Return(&csipb.NodeGetCapabilitiesResponse{}, nil).AnyTimes()
	other.Controller.EXPECT().ControllerGetCapabilities(gomock.Any(), gomock.Any()).Return(&csipb.ControllerGetCapabilitiesResponse{}, nil).AnyTimes()
	impostor := csitest.Serve(t, p.socket, other.Services())
	defer impostor.Stop()

	n.start()
	require.Eventually(t, func() bool {
		return strings.Contains(n.status("vol").Record.GetPublishes()["web-1"].GetLastError(), `now serves plugin "hp3.csi.k8s.io"`)
	}, wait, 10*time.Millisecond, "the publish says which plugin serves the socket: %v", n.status("vol").Record)
	require.NotContains(t, mountsUnder(t, n.root), res.TargetPath, "nothing was published again")
}
