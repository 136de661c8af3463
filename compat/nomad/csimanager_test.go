package nomad_test

// Nomad's own CSI manager (client/pluginmanager/csimanager, built through
// its public constructor) driven by the adapter as its DynamicRegistry,
// against plugvisor's reference hostpath plugin running as a process of its
// own: the plugin is built from the main module, on CSI spec v1.13.0, while
// this module is on v1.12.0 for Nomad (see README.md).

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/client/dynamicplugins"
	"github.com/hashicorp/nomad/client/pluginmanager/csimanager"
	"github.com/hashicorp/nomad/nomad/structs"
	"github.com/hashicorp/nomad/plugins/csi"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/compat/nomad"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
)

func TestNomadsCSIManagerFindsFingerprintsAndServesAPluginRegisteredThroughTheAdapter(t *testing.T) {
	h := newHarness(t)
	r, mgr := h.start(t)
	first := h.plugin(t, "alloc-1")
	require.NoError(t, r.RegisterPlugin(first))

	h.waitServed(t, mgr, "alloc-1")
}

func TestNomadsVolumeManagerMountsAVolumeOfThePluginTheAdapterRegistered(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the hostpath plugin publishes with a bind mount, which needs root")
	}
	h := newHarness(t)
	h.mode = "monolith" // its controller creates the volume
	r, mgr := h.start(t)
	p := h.plugin(t, "alloc-1")
	require.NoError(t, r.RegisterPlugin(p))
	vm := h.waitServed(t, mgr, "alloc-1")

	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	client := csi.NewClient(p.ConnectionInfo.SocketPath, h.log)
	defer client.Close()
	created, err := client.ControllerCreateVolume(ctx, &csi.ControllerCreateVolumeRequest{
		Name: "vol1", CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20},
		VolumeCapabilities: []*csi.VolumeCapability{{AccessType: csi.VolumeAccessTypeMount,
			AccessMode: csi.VolumeAccessModeSingleNodeWriter, MountVolume: &structs.CSIMountOptions{}}},
	})
	require.NoError(t, err)
	vol := &structs.CSIVolume{ID: "vol1", Namespace: "default", PluginID: "hostpath",
		ExternalID: created.Volume.ExternalVolumeID, Context: created.Volume.VolumeContext}
	usage := &csimanager.UsageOptions{AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
		AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter}

	mounted, err := vm.MountVolume(ctx, vol, &structs.Allocation{ID: "task-alloc"}, usage, nil)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(mounted.Source, "hello"), []byte("from Nomad's volume manager"), 0o644))
	ok, err := vm.HasMount(ctx, mounted)
	require.NoError(t, err)
	require.True(t, ok)

	require.NoError(t, vm.UnmountVolume(ctx, "default", "vol1", vol.RemoteID(), "task-alloc", usage))
	require.NoDirExists(t, mounted.Source, "Nomad removes the target once unpublished")
	written, err := filepath.Glob(filepath.Join(h.dir, "alloc-1", "root", "*", "*", "hello"))
	require.NoError(t, err)
	require.Len(t, written, 1, "the file is in the plugin's volume, not in the unmounted target")
}

func TestANewerAllocationTakesOverAndTheOlderIsCurrentAgainWhenItLeaves(t *testing.T) {
	h := newHarness(t)
	r, mgr := h.start(t)
	require.NoError(t, r.RegisterPlugin(h.plugin(t, "alloc-1")))
	h.waitServed(t, mgr, "alloc-1")

	// The newer allocation takes over: the CSI manager replaces its instance.
	require.NoError(t, r.RegisterPlugin(h.plugin(t, "alloc-2")))
	h.waitServed(t, mgr, "alloc-2")

	// The newer one leaves first: the adapter says the older is current
	// again, and the CSI manager serves it at once (with Nomad's registry it
	// waits for its next resync, 30s by default; here resyncs are off).
	require.NoError(t, r.DeregisterPlugin(dynamicplugins.PluginTypeCSINode, "hostpath", "alloc-2"))
	h.waitServed(t, mgr, "alloc-1")
}

func TestARestartedRegistryAndCSIManagerServeThePluginFromSavedState(t *testing.T) {
	for _, store := range []struct {
		name string
		use  func(t *testing.T, h *harness)
	}{
		{"in a plugvisor bolt file", func(t *testing.T, h *harness) {
			store, err := storage.OpenBolt(filepath.Join(t.TempDir(), "state.db"), storage.BoltOptions{})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, store.Close()) })
			h.cfg.Bucket, err = store.Bucket(registry.BucketName)
			require.NoError(t, err)
		}},
		{"in the embedder's StateStorage", func(_ *testing.T, h *harness) { h.cfg.State = &jsonState{} }},
	} {
		t.Run(store.name, func(t *testing.T) {
			h := newHarness(t)
			store.use(t, h)
			r, mgr := h.start(t)
			require.NoError(t, r.RegisterPlugin(h.plugin(t, "alloc-1")))
			h.waitServed(t, mgr, "alloc-1")
			require.NoError(t, r.RegisterPlugin(h.plugin(t, "alloc-2")))
			h.waitServed(t, mgr, "alloc-2")
			mgr.Shutdown()
			r.Shutdown()
			h.waitUnhealthy(t, "alloc-2") // the last fingerprint of a manager shutting down

			// The client restarts: its first resync finds the newest allocation.
			_, mgr = h.start(t)
			h.waitServed(t, mgr, "alloc-2")
		})
	}
}

// harness runs hostpath-csi processes and Nomad's CSI manager, and records
// the manager's node updates.
type harness struct {
	dir  string
	cfg  nomad.Config // the registry's, State or Bucket set for a restart
	mode string       // hostpath-csi's -mode
	log  hclog.Logger

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on each update
	latest  *structs.CSIInfo
}

func newHarness(t *testing.T) *harness {
	// A short directory: unix socket paths must fit in 107 bytes.
	dir, err := os.MkdirTemp("", "nomadcsi")
	require.NoError(t, err)
	t.Cleanup(func() { unmountUnder(t, dir); _ = os.RemoveAll(dir) })
	level := hclog.Off
	if testing.Verbose() {
		level = hclog.Debug
	}
	return &harness{dir: dir, mode: "node", changed: make(chan struct{}),
		log: hclog.New(&hclog.LoggerOptions{Output: hclog.DefaultOutput, Level: level})}
}

// start starts an adapter on the harness's state and Nomad's CSI manager
// on it, with resyncs too rare to matter, so that events drive it.
func (h *harness) start(t *testing.T) (*nomad.Registry, csimanager.Manager) {
	var r *nomad.Registry
	if h.cfg.Bucket != nil {
		h.cfg.Logger = h.log
		r = nomad.New(h.cfg)
	} else {
		r = nomad.NewRegistry(h.cfg.State, nil) // Nomad's constructor, as Nomad's client calls it
	}
	mgr := csimanager.New(&csimanager.Config{
		Logger:                h.log,
		DynamicRegistry:       r,
		UpdateNodeCSIInfoFunc: h.update,
		PluginResyncPeriod:    time.Hour,
		TriggerNodeEvent:      func(*structs.NodeEvent) {},
	})
	mgr.PluginManager().Run()
	t.Cleanup(func() { mgr.Shutdown(); r.Shutdown() }) // both are idempotent
	return r, mgr
}

func (h *harness) update(_ string, info *structs.CSIInfo) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.latest = info.Copy()
	close(h.changed)
	h.changed = make(chan struct{})
}

// waitFor waits until the latest node update satisfies ok.
func (h *harness) waitFor(t *testing.T, what string, ok func(*structs.CSIInfo) bool) {
	t.Helper()
	deadline := time.After(wait)
	for {
		h.mu.Lock()
		latest, changed := h.latest, h.changed
		h.mu.Unlock()
		if latest != nil && ok(latest) {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("no node update within %v with %s; the latest: %+v", wait, what, latest)
		}
	}
}

func (h *harness) waitHealthy(t *testing.T, alloc string) {
	t.Helper()
	h.waitFor(t, "plugin hostpath of "+alloc+" healthy", func(i *structs.CSIInfo) bool {
		return i.PluginID == "hostpath" && i.AllocID == alloc && i.Healthy && i.NodeInfo != nil && i.NodeInfo.ID == "node1"
	})
}

// waitServed waits until alloc's plugin is healthy and its volume manager
// is set up. Waiting for the volume manager also keeps clear of a data race
// in Nomad's instance manager, between setting it up and shutting down
// (instance.go: setupVolumeManager reads i.client, runLoop's shutdown
// writes it), which -race reports when an instance stops that soon.
func (h *harness) waitServed(t *testing.T, mgr csimanager.Manager, alloc string) csimanager.VolumeManager {
	t.Helper()
	h.waitHealthy(t, alloc)
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	vm, err := mgr.ManagerForPlugin(ctx, "hostpath")
	require.NoError(t, err)
	require.Equal(t, "node1", vm.ExternalID())
	return vm
}

func (h *harness) waitUnhealthy(t *testing.T, alloc string) {
	t.Helper()
	h.waitFor(t, "plugin hostpath of "+alloc+" unhealthy", func(i *structs.CSIInfo) bool {
		return i.AllocID == alloc && !i.Healthy
	})
}

// plugin starts a hostpath-csi process for alloc, waits until it answers
// Probe, and returns its registration as Nomad's plugin supervisor makes it.
func (h *harness) plugin(t *testing.T, alloc string) *dynamicplugins.PluginInfo {
	t.Helper()
	dir := filepath.Join(h.dir, alloc)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	socket := filepath.Join(dir, "csi.sock")
	cmd := exec.Command(hostpathBinary(t), "-endpoint="+socket, "-root="+filepath.Join(dir, "root"),
		"-node-id=node1", "-name=hostpath", "-mode="+h.mode)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("hostpath-csi for %s:\n%s", alloc, out.String())
		}
	})
	client := csi.NewClient(socket, h.log)
	defer client.Close()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	for {
		if ok, err := client.PluginProbe(ctx); err == nil && ok {
			break
		}
		select {
		case <-exited:
			t.Fatalf("hostpath-csi exited before answering Probe")
		case <-ctx.Done():
			t.Fatalf("hostpath-csi did not answer Probe within %v", wait)
		case <-time.After(20 * time.Millisecond): // the socket is not there yet
		}
	}
	return &dynamicplugins.PluginInfo{
		Type: dynamicplugins.PluginTypeCSINode, Name: "hostpath", Version: "test", AllocID: alloc,
		ConnectionInfo: &dynamicplugins.PluginConnectionInfo{SocketPath: socket},
		Options:        map[string]string{"Provider": "hostpath", "MountPoint": dir, "ContainerMountPoint": dir},
	}
}

var hostpath struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// hostpathBinary builds cmd/hostpath-csi once, in the main module, whose
// go.mod puts it on CSI spec v1.13.0.
func hostpathBinary(t *testing.T) string {
	hostpath.once.Do(func() {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/plugvisor/plugvisor").Output()
		if err != nil {
			hostpath.err = fmt.Errorf("find the main module: %w", err)
			return
		}
		if hostpath.dir, hostpath.err = os.MkdirTemp("", "hostpath-csi-bin"); hostpath.err != nil {
			return
		}
		hostpath.path = filepath.Join(hostpath.dir, "hostpath-csi")
		build := exec.Command("go", "build", "-o", hostpath.path, "./cmd/hostpath-csi")
		build.Dir = strings.TrimSpace(string(out))
		if out, err := build.CombinedOutput(); err != nil {
			hostpath.err = fmt.Errorf("go build ./cmd/hostpath-csi in %s: %w\n%s", build.Dir, err, out)
		}
	})
	require.NoError(t, hostpath.err)
	return hostpath.path
}

// unmountUnder detaches every mount below dir, deepest first, so that a
// test that failed half way leaves none behind.
func unmountUnder(t *testing.T, dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		if fields := strings.Fields(line); len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			points = append(points, fields[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		if err := syscall.Unmount(points[i], syscall.MNT_DETACH); err != nil {
			t.Logf("unmount %s: %v", points[i], err)
		}
	}
}
