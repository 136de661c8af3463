package agent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
)

// fakeType is a TypeManager that records its life into a shared log, with
// the instances it reports fixed by the test.
type fakeType struct {
	name      string
	log       *events
	failStart error
	instances []agent.InstanceHealth
	env       agent.TypeEnv
}

// events is an ordered record shared by several fakeTypes.
type events struct {
	mu   sync.Mutex
	said []string
}

func (e *events) add(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.said = append(e.said, s)
}

func (e *events) all() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.said...)
}

func (f *fakeType) Start(env agent.TypeEnv) error {
	f.env = env
	if f.failStart != nil {
		return f.failStart
	}
	// The registry runs already: the type can subscribe to it.
	f.log.add("start " + f.name + " registry:" + registryAnswers(env.Registry))
	return nil
}

func (f *fakeType) Instances() []agent.InstanceHealth { return f.instances }

func (f *fakeType) Shutdown(context.Context) error {
	f.log.add("stop " + f.name + " registry:" + registryAnswers(f.env.Registry))
	return nil
}

// registryAnswers says whether reg takes a write: "up", or "down" once shut down.
func registryAnswers(reg *registry.Registry) string {
	err := reg.DeregisterPlugin("probe-type", "nothing", "a0")
	if errors.Is(err, registry.ErrShutdown) {
		return "down"
	}
	return "up"
}

func TestAPluginTypeThatCollidesRepeatsOrHasNoManagerIsRefusedAtStart(t *testing.T) {
	m := &fakeType{log: &events{}}
	for _, tc := range []struct {
		name  string
		types []agent.PluginType
		want  string
	}{
		{"a built-in CSI type", []agent.PluginType{{Name: "csi-node", Manager: m}},
			`PluginTypes[0].Name "csi-node" is a built-in plugin type`},
		{"a built-in Docker type", []agent.PluginType{{Name: "docker-volume", Manager: m}},
			`PluginTypes[0].Name "docker-volume" is a built-in plugin type`},
		{"the same type twice", []agent.PluginType{{Name: "device-plugin", Manager: m}, {Name: "device-plugin", Manager: m}},
			`PluginTypes[1].Name "device-plugin" is PluginTypes[0] already`},
		{"no manager", []agent.PluginType{{Name: "device-plugin"}}, "PluginTypes[0].Manager is nil"},
		{"no name", []agent.PluginType{{Manager: m}}, "PluginTypes[0].Name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(dataDir(t), "data")
			a, err := agent.Start(agent.Config{DataDir: dir, PluginTypes: tc.types})
			require.Nil(t, a)
			require.ErrorIs(t, err, agent.ErrInvalidConfig)
			require.ErrorContains(t, err, tc.want)
			require.NoDirExists(t, dir, "a refused config creates nothing")
			require.Empty(t, m.log.all(), "a refused config starts nothing")
		})
	}
}

func TestPluginTypesStartAfterTheRegistryAndStopBeforeItInReverse(t *testing.T) {
	log := &events{}
	cfg := agent.Config{PluginTypes: []agent.PluginType{
		{Name: "first", Manager: &fakeType{name: "first", log: log}},
		{Name: "second", Manager: &fakeType{name: "second", log: log}},
	}}
	cfg.DataDir, cfg.NodeID = dataDir(t), "n1"
	a, err := agent.Start(cfg)
	require.NoError(t, err)
	require.NoError(t, a.Shutdown(context.Background()))
	require.Equal(t, []string{"start first registry:up", "start second registry:up",
		"stop second registry:up", "stop first registry:up"}, log.all())
}

func TestAPluginTypeThatFailsToStartStopsTheAgentsStartAndThoseBeforeIt(t *testing.T) {
	log := &events{}
	dir := dataDir(t)
	_, err := agent.Start(agent.Config{DataDir: dir, NodeID: "n1", PluginTypes: []agent.PluginType{
		{Name: "first", Manager: &fakeType{name: "first", log: log}},
		{Name: "broken", Manager: &fakeType{name: "broken", log: log, failStart: errors.New("no devices")}},
	}})
	require.ErrorContains(t, err, `plugin type "broken": no devices`)
	require.Equal(t, []string{"start first registry:up", "stop first registry:up"}, log.all())
	// The store was closed too: the same data dir starts again.
	a, err := agent.Start(agent.Config{DataDir: dir, NodeID: "n1"})
	require.NoError(t, err)
	require.NoError(t, a.Shutdown(context.Background()))
}

func TestAPluginTypeShowsInHealthAndMetricsByItsName(t *testing.T) {
	dev := &fakeType{name: "device-plugin", log: &events{}, instances: []agent.InstanceHealth{
		{Name: "gpu", Healthy: true, Description: "2 devices"},
		{Name: "fpga", Healthy: false, Description: "socket gone"},
	}}
	a := startWith(t, agent.Config{PluginTypes: []agent.PluginType{{Name: "device-plugin", Manager: dev}}})
	h := healthOf(t, unixClient(t, a))
	require.Equal(t, "degraded", h["status"])
	require.Equal(t, map[string]any{"device-plugin": map[string]any{"healthy": float64(1), "total": float64(2)}}, h["plugin_types"])
	require.Contains(t, h["reasons"], "1 device-plugin plugin instances are unhealthy: fpga (socket gone)")

	gpu := &messages.PluginInfo{Type: "device-plugin", Name: "gpu", AllocId: "a1",
		Connection: &messages.ConnectionInfo{SocketPath: filepath.Join(os.TempDir(), "gpu.sock")}}
	require.NoError(t, a.Registry().RegisterPlugin(gpu))
	series := scrape(t, a)
	requireZero(t, series, []string{`plugvisor_instance_restarts_total{name="gpu",type="device-plugin"}`,
		`plugvisor_instance_give_ups_total{name="gpu",type="device-plugin"}`})
	require.NotContains(t, series, `plugvisor_fingerprint_seconds_count{name="gpu",type="device-plugin"}`)
	dev.env.Metrics.InstanceRestarting(gpu)
	dev.env.Metrics.InstanceGaveUp(gpu)
	dev.env.Metrics.PluginHealth("device-plugin", "gpu", true)
	series = scrape(t, a)
	require.Equal(t, "1", series[`plugvisor_instance_restarts_total{name="gpu",type="device-plugin"}`])
	require.Equal(t, "1", series[`plugvisor_instance_give_ups_total{name="gpu",type="device-plugin"}`])
	require.Equal(t, "1", series[`plugvisor_plugin_healthy{name="gpu",type="device-plugin"}`])
}
