package main

import (
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pluginNames lists the names of the current plugins of ptype.
func pluginNames(t *testing.T, dir, ptype string) []string {
	t.Helper()
	var out struct {
		Plugins []pluginJSON `json:"plugins"`
	}
	getJSON(t, apiClient(dir), "/v1/plugins?type="+ptype, &out)
	names := []string{}
	for _, p := range out.Plugins {
		names = append(names, p.Name)
	}
	return names
}

func TestAPluginDroppedIntoTheWatchedDirIsRegisteredAndItsRemovalDeregistered(t *testing.T) {
	dir := dataDir(t)
	startAgent(t, dir, "-fingerprint-interval", "200ms")

	plugin := exec.Command(binary, "docker-volume-plugin",
		"-socket", filepath.Join(dir, "plugins", "local.sock"), "-root", filepath.Join(dir, "vols"))
	require.NoError(t, plugin.Start())
	exited := make(chan struct{})
	go func() { _ = plugin.Wait(); close(exited) }()
	t.Cleanup(func() { _ = plugin.Process.Kill(); <-exited })

	require.Eventually(t, func() bool {
		names := pluginNames(t, dir, "docker-volume")
		return len(names) == 1 && names[0] == "local"
	}, settle, 50*time.Millisecond, "the plugin was not discovered and registered")

	require.NoError(t, plugin.Process.Signal(syscall.SIGTERM)) // it removes its socket
	<-exited
	require.Eventually(t, func() bool { return len(pluginNames(t, dir, "docker-volume")) == 0 },
		settle, 50*time.Millisecond, "the plugin's removal was not deregistered")
}
