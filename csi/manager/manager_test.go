package manager_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/manager"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
	"github.com/plugvisor/plugvisor/supervisor"
)

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
