package registrytest_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/registry/registrytest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fakeClient struct{ name string }

func TestAStubbedDispenserHandsOutItsValue(t *testing.T) {
	keep := map[string]registry.Dispenser{"docker-volume": registrytest.Returning("docker")}
	cfg := registry.Config{Dispensers: keep}
	stub := &fakeClient{name: "stub"}
	registrytest.StubDispenserForType(&cfg, "csi-node", registrytest.Returning(stub))
	require.Len(t, keep, 1, "the caller's map is left as it was")

	var r registry.Interface = registrytest.New(t, probe.NewSystem(t), cfg)
	require.NoError(t, r.RegisterPlugin(&messages.PluginInfo{
		Type: "csi-node", Name: "p", AllocId: "a1",
		Connection: &messages.ConnectionInfo{SocketPath: "/run/p.sock"},
	}))
	got, err := r.DispensePlugin("csi-node", "p")
	require.NoError(t, err)
	require.Same(t, stub, got)
	_, err = r.DispensePlugin("csi-node", "absent")
	require.ErrorIs(t, err, registry.ErrNotFound, "a stub dispenses registered plugins only")
	require.Contains(t, cfg.Dispensers, "docker-volume", "the other types keep their dispensers")
}
