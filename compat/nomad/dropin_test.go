package nomad_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	nomad "github.com/plugvisor/plugvisor/compat/nomad"
	"github.com/plugvisor/plugvisor/registry"
)

// TestTheOneLineSwapLogsThroughTheProcesssLoggerOrTheOneGiven: Nomad's
// constructor, NewRegistry(state, dispensers), takes no logger, and
// Nomad's registry logs nothing. The adapter's lines (here: a stored state
// it cannot read) go to hclog.Default() with the one-line swap, never
// nowhere, and to the Nomad client's logger with WithLogger.
func TestTheOneLineSwapLogsThroughTheProcesssLoggerOrTheOneGiven(t *testing.T) {
	var byDefault, given bytes.Buffer
	previous := hclog.Default()
	hclog.SetDefault(hclog.New(&hclog.LoggerOptions{Output: &byDefault}))
	t.Cleanup(func() { hclog.SetDefault(previous) })

	r := nomad.NewRegistry(&jsonState{data: []byte("not json")}, nil)
	r.Shutdown()
	require.Contains(t, byDefault.String(), "cannot read the stored registry state; starting empty")

	byDefault.Reset()
	r = nomad.NewRegistry(&jsonState{data: []byte("not json")}, nil, nomad.WithLogger(hclog.New(&hclog.LoggerOptions{Output: &given})))
	r.Shutdown()
	require.Contains(t, given.String(), "cannot read the stored registry state; starting empty")
	require.NotContains(t, byDefault.String(), "cannot read the stored registry state")
}

// TestAnOptionPastPlugvisorsLimitIsRefusedNamingIt: each option's key and
// value may hold 4,096 bytes (registry.MaxOptionLen), as the README says;
// one byte more is refused, and nothing changes.
func TestAnOptionPastPlugvisorsLimitIsRefusedNamingIt(t *testing.T) {
	r := newRegistry(t, nil, nil)
	p := info("csi", "p", "a1", "/run/p.sock")
	p.Options = map[string]string{"k": strings.Repeat("v", registry.MaxOptionLen)}
	require.NoError(t, r.RegisterPlugin(p))
	p = info("csi", "p", "a2", "/run/p.sock")
	p.Options = map[string]string{"k": strings.Repeat("v", registry.MaxOptionLen+1)}
	err := r.RegisterPlugin(p)
	require.ErrorContains(t, err, "4096")
	require.Equal(t, "a1", r.ListPlugins("csi")[0].AllocID, "nothing changed")
}

// TestListPluginsGivesCopies: Nomad's ListPlugins returns the registry's
// own pointers; the adapter's are copies, as the README says, so a caller
// that changes one changes nothing.
func TestListPluginsGivesCopies(t *testing.T) {
	r := newRegistry(t, nil, nil)
	require.NoError(t, r.RegisterPlugin(info("csi", "p", "a1", "/run/p.sock")))
	got := r.ListPlugins("csi")[0]
	got.AllocID, got.ConnectionInfo.SocketPath = "changed", "/elsewhere"
	require.Equal(t, info("csi", "p", "a1", "/run/p.sock"), r.ListPlugins("csi")[0])
}
