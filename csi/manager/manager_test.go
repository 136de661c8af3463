package manager_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/actors/plugintype"
	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/csitest"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/csi/manager"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
	"github.com/plugvisor/plugvisor/supervisor"
	"github.com/plugvisor/plugvisor/supervisor/supervisortest"
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

func TestManagerRegisterAndDeregister(t *testing.T) {
	h := startManager(t, nil)
	socket, _ := h.serve(t)
	h.register(t, csi.TypeNode, "disk", "a1", socket)

	first := probe.Expect[*messages.CSIPluginFingerprinted](t, h.events, wait).GetFingerprint()
	require.True(t, first.GetHealthy())
	require.Equal(t, "node-1", first.GetNodeInfo().GetNodeId())
	require.Equal(t, "fake.csi.plugvisor.io", first.GetPluginInfo().GetName())
	h.events.ExpectMessages(t, wait, nodeHealthy("disk", "a1"))
	requireListed(t, h.manager, nodeHealthy("disk", "a1"))
	h.events.ExpectNone(t, quiet)

	h.deregister(t, csi.TypeNode, "disk", "a1")
	last := probe.Expect[*messages.CSIPluginFingerprinted](t, h.events, wait).GetFingerprint()
	require.False(t, last.GetHealthy())
	require.Equal(t, csi.StoppedDescription, last.GetHealthDescription())
	require.Equal(t, "node-1", last.GetNodeInfo().GetNodeId(), "the final fingerprint keeps what was learned")
	h.events.ExpectMessages(t, wait, nodeStopped("disk", "a1"))
	requireListed(t, h.manager)
	h.events.ExpectNone(t, quiet)
}

func TestManagerRunsManyPluginsAndListsThemInOrder(t *testing.T) {
	h := startManager(t, nil)
	plugins := []struct{ ptype, name string }{
		{csi.TypeNode, "zfs"}, {csi.TypeController, "ebs"}, {csi.TypeNode, "ebs"}, {csi.TypeNode, "nfs"},
	}
	var want []*messages.CSIPluginHealthChanged
	for i, p := range plugins {
		socket, _ := h.serve(t)
		alloc := fmt.Sprintf("a%d", i)
		h.register(t, p.ptype, p.name, alloc, socket)
		want = append(want, health(p.ptype, p.name, alloc, true, csi.HealthyDescription))
	}
	awaitHealth(t, h.events, want...)

	sorted := []*messages.CSIPluginHealthChanged{want[1], want[2], want[3], want[0]}
	requireListed(t, h.manager, sorted...)
	res := probe.Ask[*messages.ListCSIPluginsResponse](t, h.events, h.manager.PID(), &messages.ListCSIPluginsRequest{}, wait)
	require.Len(t, res.GetPlugins(), len(plugins))
	for i, fp := range res.GetPlugins() {
		require.Equal(t, sorted[i].GetAllocId(), fp.GetAllocId())
	}

	late := probe.New(t, h.system)
	late.Send(h.manager.PID(), &messages.SubscribeCSI{Subscriber: late.PID(), Replay: true})
	for _, w := range sorted {
		got := probe.Expect[*messages.CSIPluginFingerprinted](t, late, wait).GetFingerprint()
		require.Equal(t, w.GetAllocId(), got.GetAllocId(), "replay sends the latest fingerprints in order")
	}
	late.ExpectNone(t, quiet)
}

func TestManagerRunsAMonolithAsControllerAndAsNode(t *testing.T) {
	h := startManager(t, nil)
	socket, _ := h.serve(t)
	h.register(t, csi.TypeController, "mono", "a1", socket)
	h.register(t, csi.TypeNode, "mono", "a1", socket)
	controller := health(csi.TypeController, "mono", "a1", true, csi.HealthyDescription)
	awaitHealth(t, h.events, controller, nodeHealthy("mono", "a1"))
	requireListed(t, h.manager, controller, nodeHealthy("mono", "a1"))
	byType := map[string]*messages.CSIFingerprint{}
	for _, fp := range h.manager.Plugins() {
		byType[fp.GetType()] = fp
	}
	require.Equal(t, []string{"CREATE_DELETE_VOLUME"}, byType[csi.TypeController].GetCapabilities().GetController())
	require.Empty(t, byType[csi.TypeController].GetNodeInfo(), "a controller instance does not ask NodeGetInfo")
	require.Equal(t, []string{"STAGE_UNSTAGE_VOLUME"}, byType[csi.TypeNode].GetCapabilities().GetNode())

	h.deregister(t, csi.TypeNode, "mono", "a1")
	awaitHealth(t, h.events, nodeStopped("mono", "a1"))
	requireListed(t, h.manager, controller)
	h.events.ExpectNone(t, quiet)
}

// step is a registry operation on plugin "disk", then the health changes
// it must cause (in any order).
type step struct {
	op   func(t *testing.T, h *harness)
	want []*messages.CSIPluginHealthChanged
}

func register(alloc string, want ...*messages.CSIPluginHealthChanged) step {
	return step{func(t *testing.T, h *harness) {
		socket, _ := h.serve(t)
		h.register(t, csi.TypeNode, "disk", alloc, socket)
	}, want}
}

func deregister(alloc string, want ...*messages.CSIPluginHealthChanged) step {
	return step{func(t *testing.T, h *harness) { h.deregister(t, csi.TypeNode, "disk", alloc) }, want}
}

func TestManagerReplacesInstancesAsAllocationsComeAndGo(t *testing.T) {
	healthy := func(alloc string) *messages.CSIPluginHealthChanged { return nodeHealthy("disk", alloc) }
	stopped := func(alloc string) *messages.CSIPluginHealthChanged { return nodeStopped("disk", alloc) }
	cases := []struct {
		name    string
		steps   []step
		current string // the alloc listed at the end; "" for none
	}{
		{
			name:    "a newer alloc takes over from a healthy one",
			steps:   []step{register("a1", healthy("a1")), register("a2", stopped("a1"), healthy("a2"))},
			current: "a2",
		},
		{
			name:    "a newer alloc takes over before the old one was fingerprinted",
			steps:   []step{register("a1"), register("a2", stopped("a1"), healthy("a2"))},
			current: "a2",
		},
		{
			name: "the old alloc deregistering after a host restart changes nothing",
			steps: []step{
				register("a1", healthy("a1")), register("a2", stopped("a1"), healthy("a2")), deregister("a1"),
			},
			current: "a2",
		},
		{
			name: "the new alloc deregistering hands the plugin back to the old one",
			steps: []step{
				register("a1", healthy("a1")), register("a2"), deregister("a2", stopped("a1"), stopped("a2"), healthy("a1")),
			},
			current: "a1",
		},
		{
			name: "interleaved registrations and deregistrations settle on the newest alloc",
			steps: []step{
				register("a1"), register("a2"), deregister("a1"), register("a3"), deregister("a2", stopped("a1"), stopped("a2"), healthy("a3")),
			},
			current: "a3",
		},
		{
			name: "the last alloc deregistering stops the plugin",
			steps: []step{
				register("a1", healthy("a1")), register("a2", stopped("a1"), healthy("a2")), deregister("a1"), deregister("a2", stopped("a2")),
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := startManager(t, nil)
			for _, s := range tc.steps {
				s.op(t, h)
				awaitHealth(t, h.events, s.want...)
			}
			if tc.current == "" {
				requireListed(t, h.manager)
			} else {
				requireListed(t, h.manager, healthy(tc.current))
			}
			h.events.ExpectNone(t, quiet)
		})
	}
}

func TestManagerLeavesTheLiveInstanceAloneWhenAnotherAllocIsDeregistered(t *testing.T) {
	cases := []struct {
		name       string
		deregister func(t *testing.T, h *harness)
	}{
		{
			name: "an alloc the registry does not know",
			deregister: func(t *testing.T, h *harness) {
				require.ErrorIs(t, h.registry.DeregisterPlugin(csi.TypeNode, "disk", "nope"), registry.ErrNotFound)
			},
		},
		{
			name: "a stray event naming another alloc and the live one as current (Nomad's defect)",
			deregister: func(t *testing.T, h *harness) {
				live, ok := h.registry.Snapshot().Current(csi.TypeNode, "disk")
				require.True(t, ok)
				h.events.Send(h.manager.PID(), &messages.PluginDeregistered{
					Plugin:         pluginAt(csi.TypeNode, "disk", "nope", "/nope.sock"),
					Current:        live,
					CurrentChanged: true,
					Sequence:       h.registry.Snapshot().Sequence() + 1,
				})
			},
		},
		{
			name: "an older alloc that is not current",
			deregister: func(t *testing.T, h *harness) {
				h.deregister(t, csi.TypeNode, "disk", "a0")
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := startManager(t, nil)
			old, _ := h.serve(t)
			h.register(t, csi.TypeNode, "disk", "a0", old)
			socket, identity := h.serve(t)
			h.register(t, csi.TypeNode, "disk", "a1", socket)
			awaitHealth(t, h.events, nodeStopped("disk", "a0"), nodeHealthy("disk", "a1"))

			tc.deregister(t, h)
			h.events.ExpectNone(t, quiet)
			requireListed(t, h.manager, nodeHealthy("disk", "a1"))
			probes := identity.probes.Load()
			require.Eventually(t, func() bool { return identity.probes.Load() > probes+2 }, wait, 10*time.Millisecond,
				"the live instance goes on fingerprinting")
		})
	}
}

func TestManagerReplacesTheInstanceWhenTheCurrentAllocChangesItsSocket(t *testing.T) {
	h := startManager(t, nil)
	first, _ := h.serve(t)
	h.register(t, csi.TypeNode, "disk", "a1", first)
	awaitHealth(t, h.events, nodeHealthy("disk", "a1"))

	second, identity := h.serve(t)
	h.register(t, csi.TypeNode, "disk", "a1", second)
	require.Equal(t, "a1", finalOf(t, h, "a1").GetReplacedBy(), "the old instance's final word says the alloc's new instance took over")
	awaitHealth(t, h.events, nodeStopped("disk", "a1"), nodeHealthy("disk", "a1"))
	require.Positive(t, identity.probes.Load(), "the new instance fingerprints the new socket")
	requireListed(t, h.manager, nodeHealthy("disk", "a1"))
	h.events.ExpectNone(t, quiet)
}

func TestManagerResyncStopsExtraInstancesAndStartsMissingOnes(t *testing.T) {
	h := startManager(t, nil)
	socket, _ := h.serve(t)
	h.register(t, csi.TypeNode, "extra", "a1", socket)
	awaitHealth(t, h.events, nodeHealthy("extra", "a1"))
	h.events.Send(h.manager.PID(), &plugintype.Resync{})
	h.events.ExpectNone(t, quiet) // nothing to correct

	// The manager misses the next events, as if they had been lost.
	h.events.Send(h.registry.PID(), &messages.Unsubscribe{Type: csi.TypeNode, Subscriber: h.manager.PID()})
	socket, _ = h.serve(t)
	h.register(t, csi.TypeNode, "missing", "a2", socket)
	h.deregister(t, csi.TypeNode, "extra", "a1")
	h.events.ExpectNone(t, quiet)
	requireListed(t, h.manager, nodeHealthy("extra", "a1"))

	h.events.Send(h.manager.PID(), &plugintype.Resync{})
	awaitHealth(t, h.events, nodeStopped("extra", "a1"), nodeHealthy("missing", "a2"))
	requireListed(t, h.manager, nodeHealthy("missing", "a2"))
	h.events.ExpectNone(t, quiet)
}

func TestManagerResyncsOnItsTimer(t *testing.T) {
	h := startManager(t, func(c *manager.Config) { c.ResyncInterval = 20 * time.Millisecond })
	h.events.Send(h.registry.PID(), &messages.Unsubscribe{Type: csi.TypeNode, Subscriber: h.manager.PID()})
	socket, _ := h.serve(t)
	h.register(t, csi.TypeNode, "missing", "a1", socket)
	awaitHealth(t, h.events, nodeHealthy("missing", "a1"))
}

// supervisionCounts is a manager.Metrics that counts, by plugin name.
type supervisionCounts struct {
	mu                 sync.Mutex
	restarting, gaveUp map[string]int
}

func (s *supervisionCounts) InstanceRestarting(p *messages.PluginInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.restarting[p.GetName()]++
}

func (s *supervisionCounts) InstanceGaveUp(p *messages.PluginInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gaveUp[p.GetName()]++
}

func TestManagerRestartsAPanickingInstanceWithBackoffAndGivesUp(t *testing.T) {
	clock := supervisortest.NewFakeClock(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	var flaky string
	counts := &supervisionCounts{restarting: map[string]int{}, gaveUp: map[string]int{}}
	h := startManager(t, func(c *manager.Config) {
		c.Metrics = counts
		c.Clock = clock
		c.Supervision = supervisor.Spec{MaxRestarts: 2, Within: time.Minute, InitialDelay: time.Second, Multiplier: 2}
		c.Fingerprint.Dial = func(ctx context.Context, path string, opts csi.Options) (manager.Plugin, error) {
			if path == flaky {
				panic("boom")
			}
			return manager.DialPlugin(ctx, path, opts)
		}
	})
	flaky, _ = h.serve(t)
	h.register(t, csi.TypeNode, "flaky", "a1", flaky)
	reason := `csi: fingerprint of csi-node "flaky" (alloc a1) panicked: boom`
	expectDescription := func(want string) {
		t.Helper()
		fp := probe.Expect[*messages.CSIPluginFingerprinted](t, h.events, wait).GetFingerprint()
		require.Equal(t, "a1", fp.GetAllocId())
		require.False(t, fp.GetHealthy())
		require.Equal(t, want, fp.GetHealthDescription())
	}

	restarting := "plugin instance failed (" + reason + "): restarting in 1s"
	expectDescription(restarting)
	h.events.ExpectMessages(t, wait, health(csi.TypeNode, "flaky", "a1", false, restarting))
	clock.Advance(time.Second - time.Nanosecond)
	h.events.ExpectNone(t, quiet)
	clock.Advance(time.Nanosecond)
	expectDescription("plugin instance failed (" + reason + "): restarting in 2s")
	clock.Advance(2 * time.Second)
	gaveUp := reason + " (gave up after 2 restarts)"
	expectDescription("plugin instance failed: " + gaveUp)
	h.events.ExpectMessages(t, wait, &messages.CSIPluginFailed{Type: csi.TypeNode, Name: "flaky", AllocId: "a1", Reason: gaveUp, Restarts: 2})
	expectDescription(csi.StoppedDescription)
	counts.mu.Lock()
	require.Equal(t, 2, counts.restarting["flaky"], "the metrics hook heard of both restarts")
	require.Equal(t, 1, counts.gaveUp["flaky"])
	counts.mu.Unlock()
	requireListed(t, h.manager, health(csi.TypeNode, "flaky", "a1", false, "plugin instance failed: "+gaveUp))

	clock.Advance(time.Hour)
	h.events.Send(h.manager.PID(), &plugintype.Resync{})
	h.events.ExpectNone(t, quiet)

	good, _ := h.serve(t)
	h.register(t, csi.TypeNode, "flaky", "a2", good)
	awaitHealth(t, h.events, nodeHealthy("flaky", "a2"))
	requireListed(t, h.manager, nodeHealthy("flaky", "a2"))
}

func TestManagerShutdownPushesUnhealthyFingerprints(t *testing.T) {
	h := startManager(t, nil)
	for _, name := range []string{"a", "b", "c"} {
		socket, _ := h.serve(t)
		h.register(t, csi.TypeNode, name, "a1", socket)
	}
	awaitHealth(t, h.events, nodeHealthy("a", "a1"), nodeHealthy("b", "a1"), nodeHealthy("c", "a1"))
	h.events.Watch(t, h.manager.PID())

	require.NoError(t, h.shutdown(context.Background()))
	// The manager's Terminated is a system message, which its watcher may
	// take before the fingerprints the manager sent it first: the two are
	// awaited in any order.
	missing := []*messages.CSIPluginHealthChanged{nodeStopped("a", "a1"), nodeStopped("b", "a1"), nodeStopped("c", "a1")}
	terminated := false
	for deadline := time.Now().Add(wait); len(missing) > 0 || !terminated; {
		require.Positive(t, time.Until(deadline), "still waiting for %v, or the manager's Terminated (%v)", missing, terminated)
		switch msg := h.events.Next(t, time.Until(deadline)).Message.(type) {
		case *actor.Terminated:
			require.True(t, msg.Who.Equal(h.manager.PID()), "the Terminated of %s", msg.Who)
			terminated = true
		case *messages.CSIPluginHealthChanged:
			if i := indexOf(missing, msg); i >= 0 {
				missing = append(missing[:i], missing[i+1:]...)
			}
		}
	}
	require.NoError(t, h.manager.Shutdown(context.Background()), "a second shutdown returns the first one's result")
}

// The agent stops the instances first, so that the catalog can take in
// their final fingerprints and stop before the manager it subscribes to.
func TestManagerStopInstancesLeavesTheManagerAnsweringAndStartingNothing(t *testing.T) {
	h := startManager(t, nil)
	socket, _ := h.serve(t)
	h.register(t, csi.TypeNode, "a", "a1", socket)
	awaitHealth(t, h.events, nodeHealthy("a", "a1"))

	require.NoError(t, h.manager.StopInstances(context.Background()))
	awaitHealth(t, h.events, nodeStopped("a", "a1"))
	require.Empty(t, h.manager.Plugins())

	late, _ := h.serve(t)
	h.register(t, csi.TypeNode, "late", "a1", late)
	h.events.Send(h.manager.PID(), &plugintype.Resync{})
	list := probe.Ask[*messages.ListCSIPluginsResponse](t, h.events, h.manager.PID(), &messages.ListCSIPluginsRequest{}, wait)
	require.Empty(t, list.GetPlugins(), "the manager still answers")
	h.events.ExpectNone(t, 300*time.Millisecond) // no instance fingerprints the late plugin

	h.events.Watch(t, h.manager.PID())
	require.NoError(t, h.shutdown(context.Background()))
	h.events.ExpectTerminated(t, h.manager.PID(), wait)
}

func TestManagerShutdownNamesTheInstancesThatDidNotStop(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	var stuck string
	var shutdownErr error
	h := startManager(t, func(c *manager.Config) {
		c.Fingerprint.Dial = func(ctx context.Context, path string, opts csi.Options) (manager.Plugin, error) {
			if path == stuck {
				entered <- struct{}{}
				<-release // ignores ctx, as a broken plugin client might
				return nil, errors.New("released")
			}
			return manager.DialPlugin(ctx, path, opts)
		}
	})
	t.Cleanup(func() { // before the harness's cleanups: they shut the manager down
		close(release)
		require.ErrorContains(t, shutdownErr, "did not stop")
	})
	stuck, _ = h.serve(t)
	h.register(t, csi.TypeNode, "stuck", "a1", stuck)
	fine, _ := h.serve(t)
	h.register(t, csi.TypeNode, "fine", "a1", fine)
	awaitHealth(t, h.events, nodeHealthy("fine", "a1"))
	<-entered

	// The manager gets 9/10 of the time; the tenth left (300 ms) carries
	// its answer back on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	shutdownErr = h.shutdown(ctx)
	require.ErrorContains(t, shutdownErr, "1 plugin instances did not stop")
	require.ErrorContains(t, shutdownErr, "csi-node/stuck (alloc a1)")
	require.NotContains(t, shutdownErr.Error(), "fine")
	awaitHealth(t, h.events, nodeStopped("fine", "a1"))
}

func TestStartManagerRefusesABadConfig(t *testing.T) {
	system := probe.NewSystem(t)
	bucket, err := storage.NewMemory().Bucket(registry.BucketName)
	require.NoError(t, err)
	reg, err := registry.New(system, registry.Config{Bucket: bucket})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, reg.Shutdown()) })
	cases := []struct {
		name   string
		config manager.Config
		want   string
	}{
		{"without a registry", manager.Config{}, "needs a registry"},
		{"escalating on give-up", manager.Config{Registry: reg, Supervision: supervisor.Spec{OnGiveUp: supervisor.Escalate}}, "OnGiveUp is escalate"},
		{"with a restart window of a bare number", manager.Config{Registry: reg, Supervision: supervisor.Spec{Within: 1000}}, "Within is 1µs"},
		{"with a negative resync interval", manager.Config{Registry: reg, ResyncInterval: -time.Second}, "must not be negative"},
		{"with a negative fingerprint interval", manager.Config{Registry: reg, Fingerprint: manager.FingerprintOptions{Interval: -1}}, "must not be negative"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := manager.Start(system, tc.config)
			require.ErrorIs(t, err, csi.ErrInvalidOptions)
			require.ErrorContains(t, err, tc.want)
		})
	}
}
