package api_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
)

// TestAMountGroupReachesTheHostpathPluginAndABadOneIsRefusedAtTheEdge
// mounts a hostpath volume with a mount_group (the plugin advertises
// VOLUME_MOUNT_GROUP) after bad ones that are refused, naming the field,
// before any RPC.
func TestAMountGroupReachesTheHostpathPluginAndABadOneIsRefusedAtTheEdge(t *testing.T) {
	dir := hostpathtest.TempDir(t)
	b, a := newCSIBackend(t, dir)
	counter := serveCountedHostpath(t, b, a, dir, hostpath.Config{NodeID: "n1"})
	ctx := context.Background()
	id := createdOnPlugin(t, counter.endpoint, "v")
	run(t, b, []step{{name: "register", method: "POST", path: "/v1/volumes", status: 200,
		body: `{"id":"` + id + `","plugin_id":"hp","access_mode":"single-node-writer","attachment_mode":"file-system"}`}})
	require.Eventually(t, func() bool {
		v, err := a.catalog.GetVolume(ctx, "default", id)
		return err == nil && v.Schedulable
	}, 20*time.Second, 20*time.Millisecond)
	before := counter.of(id)
	vol := "/v1/volumes/default/" + id
	run(t, b, []step{
		{name: "a negative mount group", method: "POST", path: vol + "/mount", body: `{"alloc_id":"web-1","mount_group":"-1"}`,
			status: 400, want: `mount_group "-1" is not a GID: give a decimal number from 0 to 4294967294, as a string`},
		{name: "a mount group that is no number", method: "POST", path: vol + "/mount", body: `{"alloc_id":"web-1","mount_group":"staff"}`,
			status: 400, want: `mount_group "staff" is not a GID`},
		{name: "an absurd mount group", method: "POST", path: vol + "/mount", body: `{"alloc_id":"web-1","mount_group":"4294967295"}`,
			status: 400, want: `mount_group "4294967295" is not a GID`},
		{name: "a mount group as a JSON number", method: "POST", path: vol + "/mount", body: `{"alloc_id":"web-1","mount_group":5}`,
			status: 400, want: "mount_group"},
		{name: "a claim with a mount group", method: "POST", path: vol + "/claim", body: `{"alloc_id":"web-1","mount_group":"5"}`,
			status: 400, want: "mount_group is for a mount only"},
	})
	require.Equal(t, before, counter.of(id), "the refused requests sent no RPC")
	if st, err := a.volumes.Status(ctx, "default", id); err == nil { // no record at all is nothing changed too
		require.Empty(t, st.Record.GetPublishes(), "the refused requests changed nothing")
	}

	run(t, b, []step{
		{name: "a mount with a mount group", method: "POST", path: vol + "/mount", body: `{"alloc_id":"web-1","mount_group":"4242"}`,
			status: 200, want: `"target_path"`},
		{name: "another alloc's mount with another group", method: "POST", path: vol + "/mount", body: `{"alloc_id":"web-2","read_only":true,"mount_group":"7"}`,
			status: 409, want: `staged with mount group`},
	})
	st, err := a.volumes.Status(ctx, "default", id)
	require.NoError(t, err)
	require.Equal(t, "4242", st.Record.GetStage().GetMountGroup())
	require.Equal(t, "4242", st.Record.GetPublishes()["web-1"].GetMountGroup())
	require.NotContains(t, st.Record.GetPublishes(), "web-2", "the plugin's refusal rolled the mount back")
	run(t, b, []step{{name: "unmount", method: "POST", path: vol + "/unmount", body: `{"alloc_id":"web-1"}`, status: 200}})
}
