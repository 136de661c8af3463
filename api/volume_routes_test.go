package api_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi/catalog"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/csi/manager"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/storage"
)

// csiParts are the CSI manager, catalog and volume manager behind a backend.
type csiParts struct {
	system  *actor.ActorSystem
	manager *manager.Manager
	catalog *catalog.Catalog
	volumes *volumes.Manager
}

// newCSIBackend is newBackend with the CSI parts an agent runs, as the
// agent wires them, with mounts below dir.
func newCSIBackend(t *testing.T, dir string) (*backend, csiParts) {
	t.Helper()
	b := newBackend(t)
	system := probe.NewSystem(t)
	p := csiParts{system: system}
	var err error
	p.manager, err = manager.Start(system, manager.Config{Registry: b.registry, Logger: probe.Logger(t),
		ResyncInterval: time.Second, Fingerprint: manager.FingerprintOptions{Interval: 50 * time.Millisecond}})
	require.NoError(t, err)
	bucket, err := storage.NewMemory().Bucket(catalog.Bucket)
	require.NoError(t, err)
	p.catalog, err = catalog.Start(system, catalog.Config{Bucket: bucket, NodeID: "n1", Manager: p.manager.PID(),
		Logger: probe.Logger(t)})
	require.NoError(t, err)
	volBucket, err := storage.NewMemory().Bucket(volumes.Bucket)
	require.NoError(t, err)
	p.volumes, err = volumes.Start(system, volumes.Config{Bucket: volBucket, Catalog: p.catalog,
		Registry: b.registry, Root: filepath.Join(dir, "csi"), Logger: probe.Logger(t)})
	require.NoError(t, err)
	// The agent's order: volumes, then the manager, whose final
	// fingerprints reach the catalog, then the catalog.
	t.Cleanup(func() {
		require.NoError(t, p.volumes.Shutdown(context.Background()))
		require.NoError(t, p.manager.Shutdown(context.Background()))
		require.NoError(t, p.catalog.Shutdown(context.Background()))
	})
	b.server.CSI, b.server.Catalog, b.server.Volumes = p.manager, p.catalog, p.volumes
	return b, p
}

// TestTheVolumeRoutesAnswerEveryStatusWithAClearBody drives the volume
// routes against a real catalog and volume manager, with a real hostpath
// plugin doing real mounts.
func TestTheVolumeRoutesAnswerEveryStatusWithAClearBody(t *testing.T) {
	dir := hostpathtest.TempDir(t)
	b, a := newCSIBackend(t, dir)
	plugin := serveHostpath(t, b, a, dir)

	ctx := context.Background()
	id := createdOnPlugin(t, plugin.Endpoint, "v")
	vol := "/v1/volumes/default/" + id
	volume := `{"id":"` + id + `","plugin_id":"hp","access_mode":"single-node-writer","attachment_mode":"file-system"}`
	run(t, b, []step{
		{name: "a volume", method: "POST", path: "/v1/volumes", body: volume, status: 200, want: `"plugin_id": "hp"`},
		{name: "an unknown access mode", method: "POST", path: "/v1/volumes",
			body: `{"id":"w","plugin_id":"hp","access_mode":"sometimes","attachment_mode":"file-system"}`, status: 400, want: "unknown access mode"},
		{name: "an unknown attachment mode", method: "POST", path: "/v1/volumes",
			body: `{"id":"w","plugin_id":"hp","access_mode":"single-node-writer","attachment_mode":"floppy"}`, status: 400, want: "attachment mode"},
		{name: "an unknown field", method: "POST", path: "/v1/volumes", body: `{"id":"w","colour":1}`, status: 400, want: `unknown field "colour"`},
		{name: "a volume ID with traversal", method: "POST", path: "/v1/volumes",
			body: `{"id":"../w","plugin_id":"hp","access_mode":"single-node-writer","attachment_mode":"file-system"}`, status: 400, want: "path separator"},
		{name: "the listing", method: "GET", path: "/v1/volumes", status: 200, want: id},
		{name: "the listing in snake_case", method: "GET", path: "/v1/volumes", status: 200, want: `"current_writers": 0`},
		{name: "the listing of a namespace", method: "GET", path: "/v1/volumes?namespace=default", status: 200, want: id},
		{name: "the volume", method: "GET", path: vol, status: 200, want: `"write_claims": []`},
		{name: "a missing volume", method: "GET", path: "/v1/volumes/default/nope", status: 404, want: "not found"},
	})
	require.Eventually(t, func() bool {
		v, err := a.catalog.GetVolume(ctx, "default", id)
		return err == nil && v.Schedulable
	}, 20*time.Second, 20*time.Millisecond)
	var target string
	run(t, b, []step{
		{name: "a claim", method: "POST", path: vol + "/claim", body: `{"alloc_id":"web-0"}`, status: 200, want: `"web-0"`},
		{name: "a second writer's claim", method: "POST", path: vol + "/claim", body: `{"alloc_id":"web-9"}`, status: 409, want: "claim"},
		{name: "a claim on a missing volume", method: "POST", path: "/v1/volumes/default/nope/claim", body: `{"alloc_id":"x"}`,
			status: 404, want: "not found"},
		{name: "a claim with a bad body", method: "POST", path: vol + "/claim", body: `{"alloc":"x"}`, status: 400, want: "unknown field"},
		{name: "a release", method: "POST", path: vol + "/release", body: `{"alloc_id":"web-0"}`, status: 200,
			want: `"write_claims": []`},
		{name: "a mount", method: "POST", path: vol + "/mount", body: `{"alloc_id":"web-1"}`, status: 200, want: `"target_path"`},
		{name: "a second writer's mount", method: "POST", path: vol + "/mount", body: `{"alloc_id":"web-2"}`, status: 409, want: "claim"},
		{name: "a mount of a missing volume", method: "POST", path: "/v1/volumes/default/nope/mount", body: `{"alloc_id":"a"}`,
			status: 404, want: "not found"},
		{name: "a deregistration of a mounted volume", method: "DELETE", path: vol, status: 409, want: "in use"},
		{name: "an unmount", method: "POST", path: vol + "/unmount", body: `{"alloc_id":"web-1"}`, status: 200, want: `"unmounted"`,
			before: func(*backend) { target = mountedTarget(t, dir) }},
		{name: "an unmount of what is not mounted", method: "POST", path: vol + "/unmount", body: `{"alloc_id":"web-1"}`,
			status: 404, want: "not mounted"},
		{name: "a deregistration", method: "DELETE", path: vol, status: 200, want: `"deregistered"`},
		{name: "a deregistration of a missing volume", method: "DELETE", path: vol, status: 404, want: "not found"},
		{name: "the catalog shut down", method: "GET", path: "/v1/volumes", status: 503, want: "shut down",
			before: func(*backend) { require.NoError(t, a.catalog.Shutdown(ctx)) }},
	})
	require.NotEmpty(t, target, "the mount was a real mount")
	_, err := os.Stat(target)
	require.ErrorIs(t, err, os.ErrNotExist, "the unmount removed the target")
}

// serveHostpath serves a hostpath plugin "hp" below dir and registers it
// (registerHostpath).
func serveHostpath(t *testing.T, b *backend, a csiParts, dir string) *hostpathtest.Server {
	t.Helper()
	plugin := hostpathtest.Serve(t, hostpath.Config{Name: "hp", NodeID: "n1", Root: filepath.Join(dir, "hp"),
		Mode: hostpath.ModeMonolith, SymlinkFallback: false})
	registerHostpath(t, b, a, plugin.Endpoint)
	return plugin
}

// registerHostpath registers the hostpath plugin "hp" serving on endpoint
// as the backend's controller and node plugin; it returns once the CSI
// manager reports both healthy.
func registerHostpath(t *testing.T, b *backend, a csiParts, endpoint string) {
	t.Helper()
	sock := `"connection":{"socket_path":"` + endpoint + `"}}`
	run(t, b, []step{
		{name: "the controller", method: "POST", path: "/v1/plugins", body: `{"type":"csi-controller","name":"hp","alloc_id":"a1",` + sock,
			status: 200, want: `"registered"`},
		{name: "the node", method: "POST", path: "/v1/plugins", body: `{"type":"csi-node","name":"hp","alloc_id":"a1",` + sock,
			status: 200, want: `"registered"`},
	})
	require.Eventually(t, func() bool {
		got := serve(t, b.server.HandlerFor(unixListener), request{method: "GET", path: "/v1/csi/instances"})
		return got.status == 200 && len(a.manager.Plugins()) == 2 && a.manager.Plugins()[0].GetHealthy() && a.manager.Plugins()[1].GetHealthy()
	}, 20*time.Second, 20*time.Millisecond)
}

// TestAStuckReleaseShowsItsLastErrorInTheStatus records, through the
// agent's catalog adapter as the volume manager does, a release stuck at
// node-detached with the error of its failed detach: the volume's status
// lists the past claim with its state and that error, and the alloc keeps
// its writer slot.
func TestAStuckReleaseShowsItsLastErrorInTheStatus(t *testing.T) {
	dir := hostpathtest.TempDir(t)
	b, a := newCSIBackend(t, dir)
	serveHostpath(t, b, a, dir)
	vol := "/v1/volumes/default/db"
	run(t, b, []step{
		{name: "a volume", method: "POST", path: "/v1/volumes", status: 200, want: `"db"`,
			body: `{"id":"db","plugin_id":"hp","access_mode":"single-node-writer","attachment_mode":"file-system"}`},
	})
	require.Eventually(t, func() bool {
		v, err := a.catalog.GetVolume(context.Background(), "default", "db")
		return err == nil && v.Schedulable
	}, 20*time.Second, 20*time.Millisecond)
	run(t, b, []step{{name: "a claim", method: "POST", path: vol + "/claim", body: `{"alloc_id":"web-1"}`, status: 200, want: `"web-1"`}})

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := a.catalog.ReleaseClaim(ctx, "default", "db", &model.Claim{
		AllocID: "web-1", State: model.ClaimStateNodeDetached,
		LastError: "ControllerUnpublishVolume: unavailable: controller is down"})
	require.NoError(t, err)

	run(t, b, []step{
		{name: "the status", method: "GET", path: vol + "/status", status: 200,
			want: `"alloc_id": "web-1",
      "mode": "write",
      "state": "node-detached",
      "last_error": "ControllerUnpublishVolume: unavailable: controller is down"`},
		{name: "a second writer", method: "POST", path: vol + "/claim", body: `{"alloc_id":"web-2"}`, status: 409, want: "claim"},
	})
}

// mountedTarget is the one mount point below dir, from /proc/self/mountinfo.
func mountedTarget(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	var found []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			found = append(found, f[4])
		}
	}
	require.NotEmpty(t, found, "a mount below %s", dir)
	return found[len(found)-1]
}
