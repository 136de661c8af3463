package manager_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/csitest"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/csi/manager"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
)

const (
	wait  = 10 * time.Second       // how long to wait for what must happen
	quiet = 150 * time.Millisecond // how long to watch for what must not
)

// fastFingerprints fingerprint every 50ms and retry after 10ms.
var fastFingerprints = manager.FingerprintOptions{Interval: 50 * time.Millisecond, Retry: 10 * time.Millisecond, RPCTimeout: 2 * time.Second}

// healthyIdentity, healthyController and healthyNode are a small CSI plugin
// that answers every fingerprint RPC, healthy, and counts its Probes.
type healthyIdentity struct {
	csipb.UnimplementedIdentityServer
	probes atomic.Int64
}

func (*healthyIdentity) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{Name: "fake.csi.plugvisor.io", VendorVersion: "1.0.0"}, nil
}

func (*healthyIdentity) GetPluginCapabilities(context.Context, *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	return csitest.PluginCapabilities([]csipb.PluginCapability_Service_Type{csipb.PluginCapability_Service_CONTROLLER_SERVICE}, nil), nil
}

func (i *healthyIdentity) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	i.probes.Add(1)
	return &csipb.ProbeResponse{}, nil
}

type healthyController struct {
	csipb.UnimplementedControllerServer
}

func (healthyController) ControllerGetCapabilities(context.Context, *csipb.ControllerGetCapabilitiesRequest) (*csipb.ControllerGetCapabilitiesResponse, error) {
	return csitest.ControllerCapabilities(csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME), nil
}

type healthyNode struct {
	csipb.UnimplementedNodeServer
}

func (healthyNode) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	return &csipb.NodeGetInfoResponse{NodeId: "node-1"}, nil
}

func (healthyNode) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	return csitest.NodeCapabilities(csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME), nil
}

// newHealthyServer returns a server of a healthy plugin that listens on
// nothing yet, and its identity service.
func newHealthyServer(t testing.TB) (*csitest.Server, *healthyIdentity) {
	t.Helper()
	identity := &healthyIdentity{}
	return csitest.NewServer(t, csitest.Services{Identity: identity, Controller: healthyController{}, Node: healthyNode{}}), identity
}

// harness is a registry and a CSI manager in one actor system, with a
// probe subscribed to the manager's events and a short directory for sockets.
type harness struct {
	system   *actor.ActorSystem
	registry *registry.Registry
	manager  *manager.Manager
	events   *probe.Probe
	dir      string
	sockets  int
	shutDown bool // the test shut the manager down itself
}

// startManager starts a harness whose manager fingerprints fast and
// resyncs only when told; change adjusts the manager's config.
func startManager(t testing.TB, change func(*manager.Config)) *harness {
	t.Helper()
	h := newHarness(t)
	h.start(t, change)
	return h
}

// newHarness starts the harness's registry, and no manager yet.
func newHarness(t testing.TB) *harness {
	t.Helper()
	system := probe.NewSystem(t)
	h := &harness{system: system, dir: hostpathtest.TempDir(t), events: probe.New(t, system)}
	bucket, err := storage.NewMemory().Bucket(registry.BucketName)
	require.NoError(t, err)
	h.registry, err = registry.New(system, registry.Config{Bucket: bucket, Logger: probe.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, h.registry.Shutdown()) })
	return h
}

// start starts the harness's manager and subscribes its probe.
func (h *harness) start(t testing.TB, change func(*manager.Config)) {
	t.Helper()
	cfg := manager.Config{
		Registry:       h.registry,
		Logger:         probe.Logger(t),
		ResyncInterval: time.Hour,
		Fingerprint:    fastFingerprints,
	}
	if change != nil {
		change(&cfg)
	}
	var err error
	h.manager, err = manager.Start(h.system, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		if !h.shutDown {
			require.NoError(t, h.manager.Shutdown(context.Background()))
		}
	})
	h.events.Send(h.manager.PID(), &messages.SubscribeCSI{Subscriber: h.events.PID()})
	probe.Ask[*messages.ListCSIPluginsResponse](t, h.events, h.manager.PID(), &messages.ListCSIPluginsRequest{}, wait)
}

// shutdown shuts the manager down, instead of the test's cleanup.
func (h *harness) shutdown(ctx context.Context) error {
	h.shutDown = true
	return h.manager.Shutdown(ctx)
}

// socket returns a new socket path in the harness's directory.
func (h *harness) socket() string {
	h.sockets++
	return filepath.Join(h.dir, fmt.Sprintf("%d.sock", h.sockets))
}

// serve serves a new healthy plugin and returns its socket and identity service.
func (h *harness) serve(t testing.TB) (string, *healthyIdentity) {
	t.Helper()
	server, identity := newHealthyServer(t)
	path := h.socket()
	require.NoError(t, server.Listen(path))
	return path, identity
}

// register registers alloc of plugin (ptype, name) at socket.
func (h *harness) register(t testing.TB, ptype, name, alloc, socket string) *messages.PluginInfo {
	t.Helper()
	info := pluginAt(ptype, name, alloc, socket)
	require.NoError(t, h.registry.RegisterPlugin(info))
	return info
}

func (h *harness) deregister(t testing.TB, ptype, name, alloc string) {
	t.Helper()
	require.NoError(t, h.registry.DeregisterPlugin(ptype, name, alloc))
}

func pluginAt(ptype, name, alloc, socket string) *messages.PluginInfo {
	return &messages.PluginInfo{Type: ptype, Name: name, AllocId: alloc, Connection: &messages.ConnectionInfo{SocketPath: socket}}
}

// health is the CSIPluginHealthChanged of an instance becoming healthy, or
// unhealthy with description.
func health(ptype, name, alloc string, healthy bool, description string) *messages.CSIPluginHealthChanged {
	return &messages.CSIPluginHealthChanged{Type: ptype, Name: name, AllocId: alloc, Healthy: healthy, Description: description}
}

func nodeHealthy(name, alloc string) *messages.CSIPluginHealthChanged {
	return health(csi.TypeNode, name, alloc, true, csi.HealthyDescription)
}

func nodeStopped(name, alloc string) *messages.CSIPluginHealthChanged {
	return health(csi.TypeNode, name, alloc, false, csi.StoppedDescription)
}

// awaitHealth waits until p has received each of want, in any order,
// skipping fingerprints and other health changes; a CSIPluginFailed fails
// the test.
func awaitHealth(t testing.TB, p *probe.Probe, want ...*messages.CSIPluginHealthChanged) {
	t.Helper()
	deadline := time.Now().Add(wait)
	missing := append([]*messages.CSIPluginHealthChanged(nil), want...)
	var skipped []string
	for len(missing) > 0 {
		if time.Until(deadline) <= 0 {
			t.Fatalf("still waiting for %v; skipped %v", missing, skipped)
		}
		switch msg := p.Next(t, time.Until(deadline)).Message.(type) {
		case *messages.CSIPluginFailed:
			t.Fatalf("unexpected %v while waiting for %v", msg, missing)
		case *messages.CSIPluginHealthChanged:
			i := indexOf(missing, msg)
			if i < 0 {
				skipped = append(skipped, msg.String())
				continue
			}
			missing = append(missing[:i], missing[i+1:]...)
		}
	}
}

func indexOf[T proto.Message](list []T, m T) int {
	for i, x := range list {
		if proto.Equal(x, m) {
			return i
		}
	}
	return -1
}

// requireListed requires the manager to list exactly want (type, name,
// alloc and health), in order.
func requireListed(t testing.TB, m *manager.Manager, want ...*messages.CSIPluginHealthChanged) {
	t.Helper()
	got := make([]*messages.CSIPluginHealthChanged, 0, len(want))
	for _, fp := range m.Plugins() {
		got = append(got, health(fp.GetType(), fp.GetName(), fp.GetAllocId(), fp.GetHealthy(), fp.GetHealthDescription()))
	}
	require.Len(t, got, len(want), "listed: %v", got)
	for i := range want {
		require.True(t, proto.Equal(want[i], got[i]), "listed %d: want %v, got %v", i, want[i], got[i])
	}
}
