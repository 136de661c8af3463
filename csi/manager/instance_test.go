package manager_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"go.uber.org/mock/gomock"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/csitest"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/csi/manager"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/supervisor"
	"github.com/plugvisor/plugvisor/supervisor/supervisortest"
)

// instanceUnderTest is a plugin instance actor reporting to a probe.
type instanceUnderTest struct {
	system  *actor.ActorSystem
	pid     *actor.PID
	reports *probe.Probe
}

// startInstance starts an instance serving plugin and stops it when the
// test ends. A nil clock is the real one.
func startInstance(t *testing.T, plugin *messages.PluginInfo, opts manager.FingerprintOptions, clock supervisor.Clock) *instanceUnderTest {
	t.Helper()
	system := probe.NewSystem(t)
	u := &instanceUnderTest{system: system, reports: probe.New(t, system)}
	props, err := manager.NewInstanceProps(manager.InstanceConfig{
		Plugin: plugin, ReportTo: u.reports.PID(), Logger: probe.Logger(t), Fingerprint: opts, Clock: clock,
	})
	require.NoError(t, err)
	u.pid = system.Root.Spawn(props)
	t.Cleanup(func() { require.NoError(t, system.Root.StopFuture(u.pid).Wait()) })
	return u
}

// next returns the next fingerprint the instance reported, without its
// update time, and whether it was the final one.
func (u *instanceUnderTest) next(t *testing.T) (*messages.CSIFingerprint, bool) {
	t.Helper()
	r := probe.Expect[*messages.CSIInstanceFingerprinted](t, u.reports, wait)
	require.True(t, r.GetInstance().Equal(u.pid), "the report names its instance")
	require.NotNil(t, r.GetFingerprint().GetUpdateTime())
	fp := proto.CloneOf(r.GetFingerprint())
	fp.UpdateTime = nil
	return fp, r.GetFinal()
}

// nextHealth returns the health and description of the next report.
func (u *instanceUnderTest) nextHealth(t *testing.T) (bool, string) {
	t.Helper()
	fp, _ := u.next(t)
	return fp.GetHealthy(), fp.GetHealthDescription()
}

// shortSocket is a socket path in a fresh directory short enough for sun_path.
func shortSocket(t testing.TB) string {
	return filepath.Join(hostpathtest.TempDir(t), "csi.sock")
}

// rpcLog records the RPCs a mock plugin answered, in order.
type rpcLog chan string

func (l rpcLog) record(rpc string) func(context.Context, any) {
	return func(context.Context, any) { l <- rpc }
}

// expect waits for the next RPCs to be want, in order.
func (l rpcLog) expect(t *testing.T, want ...string) {
	t.Helper()
	for _, rpc := range want {
		select {
		case got := <-l:
			require.Equal(t, rpc, got)
		case <-time.After(wait):
			t.Fatalf("RPC %s was not sent within %v", rpc, wait)
		}
	}
}

func TestInstanceSendsExactlyTheFingerprintRPCsInOrder(t *testing.T) {
	cases := []struct {
		name        string
		ptype       string
		first, each []string
	}{
		{
			name:  "a node plugin",
			ptype: csi.TypeNode,
			first: []string{"GetPluginInfo", "GetPluginCapabilities", "NodeGetInfo", "Probe", "NodeGetCapabilities"},
			each:  []string{"Probe", "NodeGetCapabilities"},
		},
		{
			name:  "a controller plugin",
			ptype: csi.TypeController,
			first: []string{"GetPluginInfo", "GetPluginCapabilities", "Probe", "ControllerGetCapabilities"},
			each:  []string{"Probe", "ControllerGetCapabilities"},
		},
	}
	answers := map[string]answer{}
	for _, a := range []answer{pluginInfoOK, pluginCapsOK, nodeInfoOK, probeOK, nodeCapsOK, controllerCap} {
		answers[a.rpc] = a
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := csitest.NewMocks(t)
			socket := shortSocket(t)
			m.Serve(t, socket)
			log := make(rpcLog, 100)
			expect := expecters(m)
			var calls []any
			for _, rpc := range append(append([]string(nil), tc.first...), tc.each...) {
				calls = append(calls, expect[rpc](gomock.Any(), gomock.Any()).Do(log.record(rpc)).Return(answers[rpc].resp, nil))
			}
			for _, rpc := range tc.each { // every later fingerprint
				calls = append(calls, expect[rpc](gomock.Any(), gomock.Any()).Do(log.record(rpc)).Return(answers[rpc].resp, nil).AnyTimes())
			}
			gomock.InOrder(calls...)

			u := startInstance(t, pluginAt(tc.ptype, "disk", "a1", socket), fastFingerprints, nil)
			log.expect(t, tc.first...)
			healthy, _ := u.nextHealth(t)
			require.True(t, healthy)
			log.expect(t, tc.each...)
			log.expect(t, tc.each...)
			u.reports.ExpectNone(t, 0) // an unchanged fingerprint is not reported again
		})
	}
}

func TestInstanceReportsOnlyChangesAndAFinalUnhealthyFingerprint(t *testing.T) {
	server, identity := newHealthyServer(t)
	socket := shortSocket(t)
	require.NoError(t, server.Listen(socket))
	u := startInstance(t, pluginAt(csi.TypeNode, "disk", "a1", socket), fastFingerprints, nil)
	first, final := u.next(t)
	require.True(t, first.GetHealthy())
	require.False(t, final)
	require.Eventually(t, func() bool { return identity.probes.Load() >= 4 }, wait, 10*time.Millisecond)
	u.reports.ExpectNone(t, 0)

	require.NoError(t, u.system.Root.StopFuture(u.pid).Wait())
	last, final := u.next(t)
	require.True(t, final)
	want := proto.CloneOf(first)
	want.Healthy, want.HealthDescription = false, csi.StoppedDescription
	require.True(t, proto.Equal(want, last), "want %v\n got %v", want, last)
}

func TestInstanceBecomesHealthyWhenItsSocketAppears(t *testing.T) {
	socket := shortSocket(t)
	opts := manager.FingerprintOptions{Interval: time.Minute, Retry: 10 * time.Millisecond}
	u := startInstance(t, pluginAt(csi.TypeNode, "disk", "a1", socket), opts, nil)
	healthy, description := u.nextHealth(t)
	require.False(t, healthy)
	require.Equal(t, "socket "+socket+": no such file or directory", description)

	server, _ := newHealthyServer(t)
	require.NoError(t, server.Listen(socket))
	healthy, description = u.nextHealth(t) // retried well before the interval
	require.True(t, healthy, description)
}

func TestInstanceOutlivesAPluginThatHangs(t *testing.T) {
	m := csitest.NewMocks(t)
	socket := shortSocket(t)
	m.Serve(t, socket)
	hang := func(ctx context.Context, _ *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	id, node := m.Identity.EXPECT(), m.Node.EXPECT()
	gomock.InOrder(
		id.GetPluginInfo(gomock.Any(), gomock.Any()).Return(pluginInfoOK.resp, nil),
		id.GetPluginCapabilities(gomock.Any(), gomock.Any()).Return(pluginCapsOK.resp, nil),
		node.NodeGetInfo(gomock.Any(), gomock.Any()).Return(nodeInfoOK.resp, nil),
		id.Probe(gomock.Any(), gomock.Any()).DoAndReturn(hang),
		id.Probe(gomock.Any(), gomock.Any()).Return(probeOK.resp, nil),
		node.NodeGetCapabilities(gomock.Any(), gomock.Any()).Return(nodeCapsOK.resp, nil),
	)
	opts := manager.FingerprintOptions{Interval: time.Minute, Retry: 10 * time.Millisecond, RPCTimeout: 100 * time.Millisecond}
	u := startInstance(t, pluginAt(csi.TypeNode, "disk", "a1", socket), opts, nil)

	healthy, description := u.nextHealth(t)
	require.False(t, healthy)
	require.Equal(t, "Probe: deadline exceeded after 100ms", description)
	healthy, description = u.nextHealth(t)
	require.True(t, healthy, description)
	u.reports.ExpectNone(t, quiet)
}

func TestInstanceStopsPromptlyWhileAnRPCHangs(t *testing.T) {
	m := csitest.NewMocks(t)
	socket := shortSocket(t)
	m.Serve(t, socket)
	entered := make(chan struct{})
	m.Identity.EXPECT().GetPluginInfo(gomock.Any(), gomock.Any()).DoAndReturn(
		func(ctx context.Context, _ *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
			close(entered)
			<-ctx.Done()
			return nil, ctx.Err()
		})
	opts := manager.FingerprintOptions{RPCTimeout: time.Minute}
	u := startInstance(t, pluginAt(csi.TypeNode, "disk", "a1", socket), opts, nil)
	<-entered

	start := time.Now()
	require.NoError(t, u.system.Root.StopFuture(u.pid).Wait())
	require.Less(t, time.Since(start), 5*time.Second, "stopping cancels the RPC in flight")
	last, final := u.next(t)
	require.True(t, final)
	require.Equal(t, csi.StoppedDescription, last.GetHealthDescription())
}

func TestInstanceRunsOneFingerprintAtATime(t *testing.T) {
	m := csitest.NewMocks(t)
	socket := shortSocket(t)
	m.Serve(t, socket)
	var inFlight, most, probes atomic.Int64
	slowProbe := func(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for seen := most.Load(); n > seen && !most.CompareAndSwap(seen, n); seen = most.Load() {
		}
		time.Sleep(20 * time.Millisecond)
		probes.Add(1)
		return &csipb.ProbeResponse{}, nil
	}
	id, node := m.Identity.EXPECT(), m.Node.EXPECT()
	id.GetPluginInfo(gomock.Any(), gomock.Any()).Return(pluginInfoOK.resp, nil)
	id.GetPluginCapabilities(gomock.Any(), gomock.Any()).Return(pluginCapsOK.resp, nil)
	node.NodeGetInfo(gomock.Any(), gomock.Any()).Return(nodeInfoOK.resp, nil)
	id.Probe(gomock.Any(), gomock.Any()).DoAndReturn(slowProbe).AnyTimes()
	node.NodeGetCapabilities(gomock.Any(), gomock.Any()).Return(nodeCapsOK.resp, nil).AnyTimes()
	opts := manager.FingerprintOptions{Interval: time.Millisecond}
	startInstance(t, pluginAt(csi.TypeNode, "disk", "a1", socket), opts, nil)

	require.Eventually(t, func() bool { return probes.Load() >= 5 }, wait, 5*time.Millisecond)
	require.Equal(t, int64(1), most.Load())
}

// recordingClock is a fake clock that also says, on delays, for how long
// each timer was set.
type recordingClock struct {
	*supervisortest.FakeClock
	delays chan time.Duration
}

func (c recordingClock) AfterFunc(d time.Duration, f func()) supervisor.Stopper {
	s := c.FakeClock.AfterFunc(d, f)
	c.delays <- d
	return s
}

func TestInstanceRetriesWithExponentialBackoffCappedAtTheInterval(t *testing.T) {
	clock := recordingClock{supervisortest.NewFakeClock(time.Now()), make(chan time.Duration, 10)}
	var up atomic.Bool
	server, _ := newHealthyServer(t)
	socket := shortSocket(t)
	require.NoError(t, server.Listen(socket))
	opts := manager.FingerprintOptions{
		Interval: 80 * time.Millisecond,
		Retry:    10 * time.Millisecond,
		Dial: func(ctx context.Context, path string, o csi.Options) (manager.Plugin, error) {
			if !up.Load() {
				return nil, errors.New("plugin is starting")
			}
			return manager.DialPlugin(ctx, path, o)
		},
	}
	u := startInstance(t, pluginAt(csi.TypeNode, "disk", "a1", socket), opts, clock)
	healthy, description := u.nextHealth(t)
	require.False(t, healthy)
	require.Equal(t, "connect: plugin is starting", description)

	for _, want := range []time.Duration{10, 20, 40, 80, 80} {
		require.Equal(t, want*time.Millisecond, <-clock.delays)
		clock.Advance(want * time.Millisecond)
	}
	up.Store(true)
	require.Equal(t, 80*time.Millisecond, <-clock.delays)
	clock.Advance(80 * time.Millisecond)
	healthy, _ = u.nextHealth(t)
	require.True(t, healthy)
	require.Equal(t, 80*time.Millisecond, <-clock.delays, "a healthy plugin is fingerprinted every interval")
}

func TestInstanceFollowsAPluginProcessKilledAndRestarted(t *testing.T) {
	dir := hostpathtest.TempDir(t)
	cfg := hostpathtest.ProcessConfig{
		Endpoint: filepath.Join(dir, "csi.sock"),
		Driver:   hostpath.Config{Root: filepath.Join(dir, "root"), NodeID: "node-1", Mode: hostpath.ModeNode, MaxVolumes: 8},
	}
	process := hostpathtest.StartProcess(t, cfg)
	u := startInstance(t, pluginAt(csi.TypeNode, "hostpath", "a1", cfg.Endpoint), fastFingerprints, nil)
	fp, _ := u.next(t)
	require.True(t, fp.GetHealthy(), fp.GetHealthDescription())
	require.Equal(t, hostpath.DefaultName, fp.GetPluginInfo().GetName())
	wantNode := &messages.CSINodeInfo{NodeId: "node-1", MaxVolumes: 8, AccessibleTopology: map[string]string{hostpath.TopologyKey: "node-1"}}
	require.True(t, proto.Equal(wantNode, fp.GetNodeInfo()), "node info %v", fp.GetNodeInfo())

	process.Kill()
	healthy, description := u.nextHealth(t)
	require.False(t, healthy)
	require.True(t, strings.HasPrefix(description, "Probe: unavailable"), description)

	hostpathtest.StartProcess(t, cfg)
	fp = probe.FishFor(t, u.reports, wait, func(r *messages.CSIInstanceFingerprinted) bool {
		return r.GetFingerprint().GetHealthy()
	}).GetFingerprint()
	require.Equal(t, csi.HealthyDescription, fp.GetHealthDescription(), "healthy again with no outside help")
}

func TestInstanceReadsNodeInfoAgainWhenThePluginRestartsAsAnotherNode(t *testing.T) {
	clock := recordingClock{supervisortest.NewFakeClock(time.Now()), make(chan time.Duration, 10)}
	dir := hostpathtest.TempDir(t)
	cfg := hostpathtest.ProcessConfig{
		Endpoint: filepath.Join(dir, "csi.sock"),
		Driver:   hostpath.Config{Root: filepath.Join(dir, "root"), NodeID: "node-1", Mode: hostpath.ModeNode, MaxVolumes: 8},
	}
	process := hostpathtest.StartProcess(t, cfg)
	u := startInstance(t, pluginAt(csi.TypeNode, "hostpath", "a1", cfg.Endpoint), oneFingerprint, clock)
	fp, _ := u.next(t)
	require.True(t, fp.GetHealthy(), fp.GetHealthDescription())
	require.Equal(t, "node-1", fp.GetNodeInfo().GetNodeId())
	require.Equal(t, time.Minute, <-clock.delays)

	// Between two fingerprints, the plugin restarts on the same socket as
	// another node, with another limit: no fingerprint saw it down.
	process.Kill()
	cfg.Driver.NodeID, cfg.Driver.MaxVolumes = "node-2", 3
	hostpathtest.StartProcess(t, cfg)
	clock.Advance(time.Minute)
	fp, _ = u.next(t)
	require.True(t, fp.GetHealthy(), fp.GetHealthDescription())
	wantNode := &messages.CSINodeInfo{NodeId: "node-2", MaxVolumes: 3, AccessibleTopology: map[string]string{hostpath.TopologyKey: "node-2"}}
	require.True(t, proto.Equal(wantNode, fp.GetNodeInfo()), "node info %v", fp.GetNodeInfo())
}

func TestNewInstancePropsRefusesABadConfig(t *testing.T) {
	report := &actor.PID{Address: "nonhost", Id: "manager"}
	cases := []struct {
		name   string
		config manager.InstanceConfig
		want   string
	}{
		{"without a plugin", manager.InstanceConfig{ReportTo: report}, `plugin type is ""`},
		{"with a plugin type that is not CSI", manager.InstanceConfig{Plugin: pluginAt("docker-volume", "v", "a1", "/x.sock"), ReportTo: report}, `plugin type is "docker-volume"`},
		{"without an address to report to", manager.InstanceConfig{Plugin: pluginAt(csi.TypeNode, "v", "a1", "/x.sock")}, "needs a ReportTo"},
		{"with a negative retry", manager.InstanceConfig{Plugin: pluginAt(csi.TypeNode, "v", "a1", "/x.sock"), ReportTo: report,
			Fingerprint: manager.FingerprintOptions{Retry: -time.Second}}, "must not be negative"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := manager.NewInstanceProps(tc.config)
			require.ErrorIs(t, err, csi.ErrInvalidOptions)
			require.ErrorContains(t, err, tc.want)
		})
	}
}
