package agent_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/kubeletreg"
	"github.com/plugvisor/plugvisor/kubeletreg/kubeletregtest"
	"github.com/plugvisor/plugvisor/messages"
)

// NDREnv names the node-driver-registrar binary that
// TestTheRealNodeDriverRegistrarRegistersAPluginThatMountsAVolume runs
// (make kubelet-registration); without it, the test is skipped.
const NDREnv = "PLUGVISOR_NDR"

// kubeletAgent starts an agent watching a registration directory, and a
// hostpath plugin (named hp) on a socket outside every watched directory,
// as a CSI driver's node pod puts it.
func kubeletAgent(t *testing.T) (a *agent.Agent, registrationDir, endpoint string) {
	t.Helper()
	dir := dataDir(t)
	registrationDir = filepath.Join(dir, "plugins_registry")
	require.NoError(t, os.Mkdir(registrationDir, 0o755))
	a = startWith(t, agent.Config{RegistrationDirs: []string{registrationDir}, FingerprintInterval: 50 * time.Millisecond})
	endpoint = filepath.Join(dir, "hp", "csi.sock")
	require.NoError(t, os.Mkdir(filepath.Dir(endpoint), 0o755))
	serveHostpath(t, hostpath.Config{Name: "hp", NodeID: "n1", Root: filepath.Join(dir, "hp-root"),
		Mode: hostpath.ModeMonolith, SymlinkFallback: true}, endpoint)
	return a, registrationDir, endpoint
}

// createVolume creates a volume v on plugin hp at endpoint, and registers
// it in the agent's catalog, where it waits until it is schedulable.
func createVolume(t testing.TB, a *agent.Agent, endpoint string) *model.CSIVolume {
	return createNamedVolume(t, a, endpoint, "v")
}

// createNamedVolume is createVolume for a volume named name.
func createNamedVolume(t testing.TB, a *agent.Agent, endpoint, name string) *model.CSIVolume {
	t.Helper()
	ctx := context.Background()
	client, err := csi.Dial(ctx, endpoint, csi.Options{})
	require.NoError(t, err)
	created, err := client.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csipb.VolumeCapability{{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}}})
	require.NoError(t, err)
	require.NoError(t, client.Close())
	vol := model.NewCSIVolume(created.GetVolume().GetVolumeId(), 0)
	vol.PluginID, vol.AccessMode, vol.AttachmentMode = "hp", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem
	_, err = a.Catalog().RegisterVolume(ctx, vol)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		v, err := a.Catalog().GetVolume(ctx, vol.Namespace, vol.ID)
		return err == nil && v.Schedulable
	}, time.Minute, 10*time.Millisecond)
	return vol
}

// mountOne creates a volume on plugin hp, mounts it for alloc web-1,
// writes a file in it and unmounts it.
func mountOne(t *testing.T, a *agent.Agent, endpoint string) {
	t.Helper()
	ctx := context.Background()
	vol := createVolume(t, a, endpoint)
	res, err := a.Volumes().Mount(ctx, vol.Namespace, vol.ID, "web-1", false)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(res.TargetPath, "f"), []byte("x"), 0o644))
	require.NoError(t, a.Volumes().Unmount(ctx, vol.Namespace, vol.ID, "web-1"))
}

// deregistered waits until the agent holds no CSI plugin and shows no
// plugin found.
func deregistered(t *testing.T, a *agent.Agent) {
	t.Helper()
	require.Eventually(t, func() bool {
		return len(a.Registry().ListPlugins(csi.TypeNode)) == 0 && len(a.Registry().ListPlugins(csi.TypeController)) == 0 &&
			len(a.Plugins()) == 0
	}, time.Minute, 10*time.Millisecond)
}

func TestAPluginRegisteredThroughARegistrationSocketShowsInHealthAndMetricsAndMounts(t *testing.T) {
	a, registrationDir, endpoint := kubeletAgent(t)
	sc := kubeletregtest.Serve(t, filepath.Join(registrationDir, "hp-reg.sock"), kubeletregtest.CSIInfo("hp", endpoint))
	st := sc.Status(t, time.Minute)
	require.True(t, st.GetPluginRegistered(), st.GetError())
	waitHealthy(t, a, "hp")
	h := healthOf(t, unixClient(t, a))
	require.Equal(t, "ok", h["status"], h["reasons"])
	require.Equal(t, float64(1), h["discovered"])
	mountOne(t, a, endpoint)

	bad := kubeletregtest.Serve(t, filepath.Join(registrationDir, "bad-reg.sock"), kubeletregtest.CSIInfo("a/b", endpoint))
	require.False(t, bad.Status(t, time.Minute).GetPluginRegistered())
	require.Eventually(t, func() bool {
		return scrape(t, a)[`plugvisor_kubelet_registrations_refused_total{reason="name"}`] == "1"
	}, time.Minute, 10*time.Millisecond)
	h = healthOf(t, unixClient(t, a))
	require.Equal(t, "degraded", h["status"])
	require.Equal(t, float64(1), h["discovery_failures"])

	sc.Stop()
	bad.Stop()
	deregistered(t, a)
}

func TestARelativeRegistrationDirIsRefusedAtStart(t *testing.T) {
	_, err := agent.Start(agent.Config{DataDir: dataDir(t), RegistrationDirs: []string{"plugins_registry"}})
	require.ErrorIs(t, err, agent.ErrInvalidConfig)
	require.ErrorContains(t, err, `registration dir "plugins_registry" is not absolute`)
}

// TestTheRealNodeDriverRegistrarRegistersAPluginThatMountsAVolume runs
// kubernetes-csi/node-driver-registrar (the binary $PLUGVISOR_NDR) beside
// the hostpath plugin, as a CSI driver's node pod runs it: the sidecar
// starts, the plugin is registered and fingerprinted healthy, a volume
// mounts, the sidecar stops, and the plugin is deregistered.
func TestTheRealNodeDriverRegistrarRegistersAPluginThatMountsAVolume(t *testing.T) {
	ndr := os.Getenv(NDREnv)
	if ndr == "" {
		t.Skipf("$%s is not set: make kubelet-registration NDR=path/to/ndr runs this test", NDREnv)
	}
	a, registrationDir, endpoint := kubeletAgent(t)
	cmd := exec.Command(ndr, "--csi-address", endpoint, "--kubelet-registration-path", endpoint,
		"--plugin-registration-path", registrationDir, "--v", "2")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	started := time.Now()
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	waitHealthy(t, a, "hp")
	t.Logf("node-driver-registrar started → plugin hp registered and healthy in plugvisor: %v", time.Since(started).Round(time.Millisecond))
	socket := filepath.Join(registrationDir, "hp-reg.sock")
	for _, ptype := range []string{csi.TypeNode, csi.TypeController} {
		p, ok := a.Registry().Snapshot().Current(ptype, "hp")
		require.True(t, ok, "%s hp", ptype)
		require.Equal(t, kubeletreg.AllocID(socket), p.GetAllocId())
	}
	for _, p := range a.Plugins() {
		require.Equal(t, messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_REGISTERED, p.GetState())
		t.Logf("discovered: %s %s from %s, %s, health %s", p.GetKind(), p.GetName(), p.GetSource(), p.GetAddress(), p.GetHealth())
	}
	mountOne(t, a, endpoint)
	t.Logf("volume mounted through the plugin and unmounted")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM)) // as kubelet stops a pod: the sidecar removes its socket
	select {
	case <-exited:
	case <-time.After(time.Minute):
		t.Fatal("node-driver-registrar did not exit within a minute of SIGTERM")
	}
	stopped := time.Now()
	deregistered(t, a)
	t.Logf("node-driver-registrar stopped → plugin hp deregistered: %v", time.Since(stopped).Round(time.Millisecond))
}
