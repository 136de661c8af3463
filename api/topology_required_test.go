package api_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/controller"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
)

// TestAPluginWithAccessibilityConstraintsRequiresATopologyBeforeAnyRPC
// runs the hostpath plugin with -topology (it advertises
// VOLUME_ACCESSIBILITY_CONSTRAINTS) and attaching (a registration asks its
// controller first): a registration or a create without a topology is
// refused before any RPC and changes nothing; with one it goes through.
func TestAPluginWithAccessibilityConstraintsRequiresATopologyBeforeAnyRPC(t *testing.T) {
	dir := hostpathtest.TempDir(t)
	b, a := newCSIBackend(t, dir)
	counter := serveCountedHostpath(t, b, a, dir, hostpath.Config{NodeID: "n1", AttachRequired: true, Topology: true})
	ctl, err := controller.New(controller.Config{Catalog: a.catalog, Plugins: b.registry, NodeExpander: a.volumes,
		OperationTimeout: 30 * time.Second})
	require.NoError(t, err)
	b.server.Controller = ctl
	ctx := context.Background()
	require.Eventually(t, func() bool {
		plugins, err := a.catalog.Plugins(ctx)
		return err == nil && len(plugins) == 1 && plugins[0].TopologyRequired()
	}, 20*time.Second, 20*time.Millisecond, "the catalog records that the plugin requires topologies")

	id := createdOnPlugin(t, counter.endpoint, "v")
	plain := `{"id":"` + id + `","plugin_id":"hp","access_mode":"single-node-writer","attachment_mode":"file-system"`
	const remedy = `topologies: plugin "hp" advertises VOLUME_ACCESSIBILITY_CONSTRAINTS, so each of its volumes needs a topology`
	run(t, b, []step{
		{name: "a registration without a topology", method: "POST", path: "/v1/volumes", body: plain + `}`, status: 400, want: remedy},
		{name: "a batch item without one", method: "POST", path: "/v1/volumes:batch", status: 400, want: `volumes[0] (volume "` + id + `")`,
			body: `{"volumes":[` + plain + `}]}`},
		{name: "a create without requirements", method: "POST", path: "/v1/volumes/default/new/create", status: 400, want: "volume create -requisite or -preferred",
			body: `{"plugin_id":"hp","access_mode":"single-node-writer","attachment_mode":"file-system"}`},
	})
	require.Empty(t, counter.of(id), "no ValidateVolumeCapabilities")
	entries, err := os.ReadDir(filepath.Join(dir, "hp", "volumes"))
	require.NoError(t, err)
	require.Len(t, entries, 1, "no CreateVolume: the plugin holds only the volume made before")
	stubs, err := a.catalog.ListVolumes(ctx, "")
	require.NoError(t, err)
	require.Empty(t, stubs, "nothing registered")

	run(t, b, []step{
		{name: "a registration with a topology", method: "POST", path: "/v1/volumes", status: 200, want: `"id": "` + id + `"`,
			body: plain + `,"topologies":[{"` + hostpath.TopologyKey + `":"n1"}]}`},
	})
}
