package csi_test

import (
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"go.uber.org/mock/gomock"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/csitest"
)

// TestCachedCapabilitiesAreAskedOncePerConnection asks a plugin's node and
// controller capabilities three times each through the cache: the plugin
// answers each once. Then the plugin restarts on its socket with other
// capabilities, and the cache answers the new ones (asked once more).
func TestCachedCapabilitiesAreAskedOncePerConnection(t *testing.T) {
	path := csitest.SocketPath(t)
	first := csitest.NewMocks(t)
	server := first.Serve(t, path)
	first.Node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).Times(1).
		Return(csitest.NodeCapabilities(csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME), nil)
	first.Controller.EXPECT().ControllerGetCapabilities(gomock.Any(), gomock.Any()).Times(1).
		Return(csitest.ControllerCapabilities(csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME), nil)
	c := dial(t, path, testOptions)
	for range 3 {
		node, err := c.NodeCapabilitiesCached(t.Context())
		require.NoError(t, err)
		require.True(t, node.StageUnstageVolume)
		ctrl, err := c.ControllerCapabilitiesCached(t.Context())
		require.NoError(t, err)
		require.True(t, ctrl.PublishUnpublishVolume)
	}

	server.Stop()
	second := csitest.NewMocks(t)
	second.Node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).MinTimes(1).
		Return(csitest.NodeCapabilities(), nil)
	second.Serve(t, path)
	require.Eventually(t, func() bool {
		node, err := c.NodeCapabilitiesCached(t.Context())
		return err == nil && !node.StageUnstageVolume
	}, 10*time.Second, 5*time.Millisecond, "the restarted plugin's capabilities replace the cached ones")
	node, err := c.NodeCapabilitiesCached(t.Context())
	require.NoError(t, err)
	require.False(t, node.StageUnstageVolume, "and stay")
}

// TestCachedControllerCapabilitiesRememberNoControllerService asks the
// controller capabilities of a plugin without a controller service twice:
// both answers are ErrUnimplemented.
func TestCachedControllerCapabilitiesRememberNoControllerService(t *testing.T) {
	m := csitest.NewMocks(t)
	path := csitest.SocketPath(t)
	csitest.Serve(t, path, csitest.Services{Identity: m.Services().Identity, Node: m.Services().Node})
	c := dial(t, path, testOptions)
	for range 2 {
		_, err := c.ControllerCapabilitiesCached(t.Context())
		require.ErrorIs(t, err, csi.ErrUnimplemented)
	}
}

// TestCachedPluginInfoIsAskedOncePerConnection asks a plugin's name three
// times through the cache: the plugin answers once. Then another plugin
// takes the socket, and the cache answers its name.
func TestCachedPluginInfoIsAskedOncePerConnection(t *testing.T) {
	path := csitest.SocketPath(t)
	first := csitest.NewMocks(t)
	server := first.Serve(t, path)
	first.Identity.EXPECT().GetPluginInfo(gomock.Any(), gomock.Any()).Times(1).
		Return(&csipb.GetPluginInfoResponse{Name: "hostpath.csi.k8s.io", VendorVersion: "1"}, nil)
	c := dial(t, path, testOptions)
	for range 3 {
		info, err := c.PluginInfoCached(t.Context())
		require.NoError(t, err)
		require.Equal(t, "hostpath.csi.k8s.io", info.Name)
	}

	server.Stop()
	second := csitest.NewMocks(t)
	second.Identity.EXPECT().GetPluginInfo(gomock.Any(), gomock.Any()).MinTimes(1).
		Return(&csipb.GetPluginInfoResponse{Name: "hp3.csi.k8s.io", VendorVersion: "1"}, nil)
	second.Serve(t, path)
	require.Eventually(t, func() bool {
		info, err := c.PluginInfoCached(t.Context())
		return err == nil && info.Name == "hp3.csi.k8s.io"
	}, 10*time.Second, 5*time.Millisecond, "the name of the plugin now on the socket")
	info, err := c.PluginInfoCached(t.Context())
	require.NoError(t, err)
	require.Equal(t, "hp3.csi.k8s.io", info.Name, "and stays")
}
