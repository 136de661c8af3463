package csi_test

import (
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/csitest"
	"go.uber.org/mock/gomock"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestGetPluginInfoIsSentAgainWhileUnavailableThreeTimesInAll(t *testing.T) {
	m, c := servedMocks(t, testOptions)
	starting := status.Error(codes.Unavailable, "starting up")
	gomock.InOrder(
		m.Identity.EXPECT().GetPluginInfo(gomock.Any(), gomock.Any()).Return(nil, starting).Times(2),
		m.Identity.EXPECT().GetPluginInfo(gomock.Any(), gomock.Any()).Return(&csipb.GetPluginInfoResponse{Name: "disk.csi.example.com", VendorVersion: "1"}, nil),
	)
	info, err := c.GetPluginInfo(t.Context())
	require.NoError(t, err)
	require.Equal(t, "disk.csi.example.com", info.Name)

	// Three failures in a row: the third is the answer, in the plugin's
	// words, without gRPC's own about its retries.
	m.Identity.EXPECT().GetPluginInfo(gomock.Any(), gomock.Any()).Return(nil, starting).Times(3)
	_, err = c.GetPluginInfo(t.Context())
	require.ErrorIs(t, err, csi.ErrUnavailable)
	require.NotContains(t, err.Error(), "retries")
	require.Contains(t, err.Error(), "starting up")
}

func TestNodeGetCapabilitiesIsSentAgainButNoOtherCallIs(t *testing.T) {
	m, c := servedMocks(t, testOptions)
	gomock.InOrder(
		m.Node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).Return(nil, status.Error(codes.Unavailable, "EOF")),
		m.Node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).Return(&csipb.NodeGetCapabilitiesResponse{}, nil),
	)
	_, err := c.NodeGetCapabilities(t.Context())
	require.NoError(t, err)

	// A call that asks something of the plugin is sent once.
	m.Node.EXPECT().NodeGetInfo(gomock.Any(), gomock.Any()).Return(nil, status.Error(codes.Unavailable, "busy")).Times(1)
	_, err = c.NodeGetInfo(t.Context())
	require.ErrorIs(t, err, csi.ErrUnavailable)
}

// A plugin that has stopped is said to be so, in words an operator reads,
// with gRPC's own about the dial kept for the diagnosis.
func TestACallToAPluginThatStoppedSaysThePluginDoesNotAnswer(t *testing.T) {
	path := csitest.SocketPath(t)
	m := csitest.NewMocks(t)
	server := m.Serve(t, path)
	m.Identity.EXPECT().GetPluginInfo(gomock.Any(), gomock.Any()).Return(&csipb.GetPluginInfoResponse{Name: "disk.csi.example.com", VendorVersion: "1"}, nil)
	c := dial(t, path, testOptions)
	_, err := c.GetPluginInfo(t.Context())
	require.NoError(t, err)

	server.Stop()
	require.Eventually(t, func() bool {
		_, err = c.GetPluginInfo(t.Context())
		return err != nil && strings.Contains(err.Error(), "connection error")
	}, 10*time.Second, 10*time.Millisecond, "the client sees the plugin's transport gone")
	require.ErrorIs(t, err, csi.ErrUnavailable)
	require.ErrorContains(t, err, "GetPluginInfo: unavailable: the plugin does not answer at its socket: it stopped, or is starting again (connection error")
}
