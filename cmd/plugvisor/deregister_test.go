package main

import (
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
)

// healthyCSI says every CSI plugin of the registry is healthy.
type healthyCSI []*messages.CSIFingerprint

func (h healthyCSI) Plugins() []*messages.CSIFingerprint { return h }

// TestPluginDeregisterNeedsForceForAHealthyCurrentAllocationThatServes runs
// the CLI against the API served on a data dir's socket: deregistering a
// plugin's healthy current allocation whose socket still answers is
// refused, naming -force, and changes nothing; -force deregisters it.
func TestPluginDeregisterNeedsForceForAHealthyCurrentAllocationThatServes(t *testing.T) {
	dir := dataDir(t)
	plugin, err := net.Listen("unix", filepath.Join(dir, "p.sock"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = plugin.Close() })
	system := probe.NewSystem(t)
	mem, err := storage.NewMemory().Bucket(registry.BucketName)
	require.NoError(t, err)
	reg, err := registry.New(system, registry.Config{Bucket: mem, Logger: probe.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Shutdown() })
	require.NoError(t, reg.RegisterPlugin(&messages.PluginInfo{Type: "csi-node", Name: "p", AllocId: "a1",
		Connection: &messages.ConnectionInfo{SocketPath: plugin.Addr().String()}}))
	server := &api.Server{Registry: reg, CSI: healthyCSI{{Type: "csi-node", Name: "p", AllocId: "a1", Healthy: true}}}
	l, err := net.Listen("unix", agent.SocketPath(dir))
	require.NoError(t, err)
	srv := &http.Server{Handler: server.HandlerFor(api.Listener{Name: "unix", Hosts: []string{"plugvisor"}})}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		require.NoError(t, srv.Close())
		require.True(t, errors.Is(<-served, http.ErrServerClosed))
	})

	_, stderr, code := runHere("plugin", "deregister", "-data-dir", dir, "csi-node", "p", "a1")
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "plugvisor plugin deregister: not deregistered: csi-node p: allocation a1 is its healthy current allocation")
	require.Contains(t, stderr, "stop the plugin first, or send force=true (plugvisor plugin deregister -force)")
	_, ok := reg.Snapshot().Current("csi-node", "p")
	require.True(t, ok, "the refusal changed nothing")

	stdout, stderr, code := runHere("plugin", "deregister", "-force", "-data-dir", dir, "csi-node", "p", "a1")
	require.Zero(t, code, stderr)
	require.Equal(t, "deregistered csi-node p alloc a1; the plugin is gone\n", stdout)
}
