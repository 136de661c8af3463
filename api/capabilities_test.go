package api_test

import (
	"context"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/controller"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
)

// TestAVolumeRegistersWithSeveralCapabilitiesThePluginConfirms registers
// a volume of a hostpath plugin that attaches (so that its controller is
// asked, as Nomad asks a plugin that requires a controller) with several
// capabilities, and mounts it with one of them.
func TestAVolumeRegistersWithSeveralCapabilitiesThePluginConfirms(t *testing.T) {
	dir := hostpathtest.TempDir(t)
	b, a := newCSIBackend(t, dir)
	counter := serveCountedHostpath(t, b, a, dir, hostpath.Config{NodeID: "n1", AttachRequired: true})
	ctl, err := controller.New(controller.Config{Catalog: a.catalog, Plugins: b.registry, NodeExpander: a.volumes,
		OperationTimeout: 30 * time.Second})
	require.NoError(t, err)
	b.server.Controller = ctl

	ctx := context.Background()
	id := createdOnPlugin(t, counter.endpoint, "v")
	register := func(caps string) string {
		return `{"id":"` + id + `","plugin_id":"hp","capabilities":[` + caps + `]}`
	}
	const writer = `{"access_mode":"single-node-writer","attachment_mode":"file-system"}`
	const reader = `{"access_mode":"single-node-reader-only","attachment_mode":"file-system"}`
	const multi = `{"access_mode":"multi-node-multi-writer","attachment_mode":"file-system"}`
	validate := "/csi.v1.Controller/ValidateVolumeCapabilities"

	run(t, b, []step{
		{name: "an unknown capability", method: "POST", path: "/v1/volumes", status: 400,
			body: register(writer + `,{"access_mode":"sometimes","attachment_mode":"file-system"}`), want: `capabilities[1].access_mode: unknown access mode "sometimes"`},
		{name: "a capability twice", method: "POST", path: "/v1/volumes", status: 400,
			body: register(writer + "," + writer), want: "capabilities[1] repeats capabilities[0]"},
		{name: "modes and capabilities both", method: "POST", path: "/v1/volumes", status: 400,
			body: `{"id":"` + id + `","plugin_id":"hp","access_mode":"single-node-writer","capabilities":[` + writer + `]}`, want: "leave access_mode and attachment_mode out"},
	})
	require.Empty(t, counter.of(id), "input refused at the edge sends no RPC")
	run(t, b, []step{
		{name: "a capability the plugin refuses", method: "POST", path: "/v1/volumes", status: 400,
			body: register(writer + "," + multi), want: "did not confirm capabilities"},
	})
	require.Equal(t, []string{validate}, counter.of(id), "the plugin was asked")
	_, err = a.catalog.GetVolume(ctx, "default", id)
	require.Error(t, err, "the refused registration changed nothing")

	run(t, b, []step{
		{name: "two capabilities the plugin confirms", method: "POST", path: "/v1/volumes", status: 200,
			body: register(writer + "," + reader), want: `"access_mode": "single-node-reader-only"`},
	})
	require.Eventually(t, func() bool {
		v, err := a.catalog.GetVolume(ctx, "default", id)
		return err == nil && v.Schedulable
	}, 20*time.Second, 20*time.Millisecond)
	vol := "/v1/volumes/default/" + id
	run(t, b, []step{
		{name: "a mount that names no capability", method: "POST", path: vol + "/mount", body: `{"alloc_id":"web-0","read_only":true}`,
			status: 400, want: "has 2 capabilities that fit the claim by alloc web-0"},
		{name: "a claim with an unknown access mode", method: "POST", path: vol + "/claim", body: `{"alloc_id":"web-0","access_mode":"often"}`,
			status: 400, want: "access_mode: unknown access mode"},
		{name: "an unmount that names a capability", method: "POST", path: vol + "/unmount", body: `{"alloc_id":"web-0","access_mode":"single-node-writer"}`,
			status: 400, want: "leave them out of an unmount"},
	})
	require.Equal(t, []string{validate, validate}, counter.of(id), "the refused mount sent no RPC")
	run(t, b, []step{
		{name: "a reader's mount", method: "POST", path: vol + "/mount", status: 200, want: `"target_path"`,
			body: `{"alloc_id":"web-1","read_only":true,"access_mode":"single-node-reader-only"}`},
		{name: "the volume", method: "GET", path: vol, status: 200, want: `"read_claims": [
    "web-1"
  ]`},
		{name: "the plugin's volumes", method: "GET", path: "/v1/volumes?plugin=hp", status: 200, want: `"id": "` + id + `"`},
		{name: "another plugin's volumes", method: "GET", path: "/v1/volumes?plugin=nfs", status: 200, want: `"volumes": []`},
		{name: "a plugin name that cannot be one", method: "GET", path: "/v1/volumes?plugin=a%2Fb", status: 400, want: "plugin"},
	})
	rec, err := a.volumes.Status(ctx, "default", id)
	require.NoError(t, err)
	require.Equal(t, "single-node-reader-only", rec.Record.GetAccessMode(), "the node staged the volume as the claim chose")
}

// createdOnPlugin creates volume name, a single-node-writer file system, on
// the plugin at endpoint, and returns its ID.
func createdOnPlugin(t *testing.T, endpoint, name string) string {
	t.Helper()
	ctx := context.Background()
	client, err := csi.Dial(ctx, endpoint, csi.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, client.Close()) }()
	created, err := client.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csipb.VolumeCapability{{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}}})
	require.NoError(t, err)
	return created.GetVolume().GetVolumeId()
}
