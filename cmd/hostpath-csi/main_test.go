package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
)

func TestMain(m *testing.M) {
	hostpathtest.Main(m)
}

func TestRunRejectsBadFlags(t *testing.T) {
	dir := hostpathtest.TempDir(t)
	root := "-root=" + filepath.Join(dir, "root")
	endpoint := "-endpoint=" + filepath.Join(dir, "csi.sock")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no endpoint", []string{root}, "missing required flag -endpoint (unix socket to serve on"},
		{"empty endpoint", []string{root, "-endpoint="}, "-endpoint: invalid endpoint: the unix socket path must not be empty"},
		{"relative endpoint", []string{root, "-endpoint=csi.sock"}, `unix socket path "csi.sock" must be absolute`},
		{"endpoint longer than a unix socket allows", []string{root, "-endpoint=/" + strings.Repeat("s", 110)}, "is 111 bytes, longer than the 107 a unix socket allows"},
		{"unknown mode", []string{root, endpoint, "-mode=both"}, `mode "both" must be controller, node or monolith`},
		{"node id that climbs out of its directory", []string{root, endpoint, "-node-id=../x"}, "node id \"../x\" must not contain a path separator"},
		{"relative root", []string{endpoint, "-root=var/lib"}, `root "var/lib" must be an absolute path`},
		{"unknown flag", []string{endpoint, "-bogus"}, "unknown flag: -bogus"},
		{"stray argument", []string{root, endpoint, "extra"}, `hostpath-csi takes no arguments, got ["extra"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			err := hostpath.Run(t.Context(), tt.args, &stderr)
			require.Error(t, err)
			require.Contains(t, err.Error()+stderr.String(), tt.want)
		})
	}
	require.NoFileExists(t, filepath.Join(dir, "csi.sock"))
}

func TestHelpStatesTheStrictRulesWithAnExample(t *testing.T) {
	var stderr bytes.Buffer
	err := hostpath.Run(t.Context(), []string{"-h"}, &stderr)
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(stderr.String(), "Usage:"), "the usage is printed once")
	for _, want := range []string{
		"a second staging path is FailedPrecondition",
		"NodeUnstageVolume while any target is published is FailedPrecondition",
		"NodePublishVolume before NodeStageVolume",
		"-attach-required",
		"ControllerPublishVolume to a second node is FailedPrecondition",
		"Examples:\n  # for the agent of /var/lib/plugvisor, as the plugin \"hostpath\":\n  hostpath-csi -name hostpath -endpoint /var/lib/plugvisor/plugins/hostpath.sock",
		"Secrets in requests are never logged",
	} {
		require.Contains(t, stderr.String(), want)
	}
}

func TestRunPassesAttachRequired(t *testing.T) {
	dir := hostpathtest.TempDir(t)
	socket := filepath.Join(dir, "csi.sock")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- hostpath.Run(ctx, []string{"-endpoint=" + socket, "-root=" + filepath.Join(dir, "root"), "-node-id=n1", "-attach-required"}, io.Discard)
	}()
	conn := hostpathtest.Dial(t, socket)
	caps, err := csi.NewControllerClient(conn).ControllerGetCapabilities(t.Context(), &csi.ControllerGetCapabilitiesRequest{}, grpc.WaitForReady(true))
	require.NoError(t, err)
	var attach bool
	for _, c := range caps.GetCapabilities() {
		attach = attach || c.GetRpc().GetType() == csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME
	}
	require.True(t, attach, "-attach-required advertises PUBLISH_UNPUBLISH_VOLUME")
	cancel()
	require.NoError(t, <-done)
}

func TestRunServesUntilCancelledThenRemovesTheSocket(t *testing.T) {
	dir := hostpathtest.TempDir(t)
	socket := filepath.Join(dir, "csi.sock")
	ctx, cancel := context.WithCancel(t.Context())
	var stderr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- hostpath.Run(ctx, []string{"-endpoint=unix://" + socket, "-root=" + filepath.Join(dir, "root"),
			"-node-id=n1", "-name=test.example.com", "-version=9.9.9", "-mode=controller", "-max-volumes=3"}, &stderr)
	}()

	conn := hostpathtest.Dial(t, socket)
	info, err := csi.NewIdentityClient(conn).GetPluginInfo(t.Context(), &csi.GetPluginInfoRequest{}, grpc.WaitForReady(true))
	require.NoError(t, err)
	require.Equal(t, "test.example.com", info.GetName())
	require.Equal(t, "9.9.9", info.GetVendorVersion())
	require.Equal(t, "controller", info.GetManifest()["mode"])

	cancel()
	require.NoError(t, <-done)
	require.NoFileExists(t, socket)
	require.Contains(t, stderr.String(), "hostpath-csi: started")
	require.Contains(t, stderr.String(), "hostpath-csi: exited cleanly")
}
