package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"go.uber.org/mock/gomock"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog"
	"github.com/plugvisor/plugvisor/csi/controller"
	"github.com/plugvisor/plugvisor/csi/csitest"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/dockervolume"
	dockervolumes "github.com/plugvisor/plugvisor/dockervolume/volumes"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
)

// secretValue may appear in no response and no log line.
const secretValue = "s3cr3t-do-not-print"

// apiFixture serves the API over a real catalog, registry, volume manager,
// controller operations and Docker volume service, and records every
// response body and log line.
type apiFixture struct {
	t       *testing.T
	handler http.Handler
	reg     *registry.Registry
	cat     *catalog.Catalog
	vols    *volumes.Manager
	docker  *dockervolumes.Service
	logs    *probe.LogBuffer
	bodies  []string
}

func newAPIFixture(t *testing.T) *apiFixture {
	t.Helper()
	logs := &probe.LogBuffer{}
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, Output: logs})
	system := probe.NewSystem(t)
	mem := storage.NewMemory()
	regBucket, err := mem.Bucket(registry.BucketName)
	require.NoError(t, err)
	reg, err := registry.New(system, registry.Config{Bucket: regBucket, Logger: logger})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, reg.Shutdown()) })
	catBucket, err := mem.Bucket(catalog.Bucket)
	require.NoError(t, err)
	cat, err := catalog.Start(system, catalog.Config{Bucket: catBucket, NodeID: "node-1", Logger: logger})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cat.Shutdown(context.Background())) })
	volBucket, err := mem.Bucket(volumes.Bucket)
	require.NoError(t, err)
	vols, err := volumes.Start(system, volumes.Config{Bucket: volBucket, Catalog: cat,
		Registry: reg, Root: t.TempDir(), Logger: logger})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, vols.Shutdown(context.Background())) })
	ctl, err := controller.New(controller.Config{Catalog: cat, Plugins: reg, NodeExpander: vols, OperationTimeout: 30 * time.Second, Logger: logger})
	require.NoError(t, err)
	dockerBucket, err := mem.Bucket(dockervolumes.Bucket)
	require.NoError(t, err)
	docker, err := dockervolumes.Start(system, dockervolumes.Config{Bucket: dockerBucket,
		Drivers: dockervolumes.RegistryDrivers{Registry: reg, Retry: dockervolume.NoRetry}, Logger: logger})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, docker.Shutdown()) })
	f := &apiFixture{t: t, reg: reg, cat: cat, vols: vols, docker: docker, logs: logs,
		handler: (&api.Server{Registry: reg, Catalog: cat, Volumes: vols, Controller: ctl, DockerVolumes: docker, Logger: logger}).Handler()}
	t.Cleanup(func() {
		for _, b := range f.bodies {
			require.NotContains(t, b, secretValue, "no response carries a secret")
		}
		require.NotContains(t, logs.String(), secretValue, "no log line carries a secret")
	})
	return f
}

func (f *apiFixture) registerController(name, socket string) {
	f.t.Helper()
	require.NoError(f.t, f.reg.RegisterPlugin(&messages.PluginInfo{
		Type: csi.TypeController, Name: name, AllocId: "alloc-1", Connection: &messages.ConnectionInfo{SocketPath: socket},
	}))
}

// do sends a request with a raw body and returns the status and body.
func (f *apiFixture) do(method, path, body string) (int, string) {
	f.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	f.handler.ServeHTTP(rec, req)
	f.bodies = append(f.bodies, rec.Body.String())
	return rec.Code, rec.Body.String()
}

// call sends a request, requires the status, and decodes the answer.
func (f *apiFixture) call(method, path, body string, want int, out any) {
	f.t.Helper()
	code, got := f.do(method, path, body)
	require.Equal(f.t, want, code, "%s %s answered %s", method, path, got)
	if out != nil {
		require.NoError(f.t, json.Unmarshal([]byte(got), out))
	}
}

const createBody = `{"plugin_id": "hostpath", "capacity": {"required_bytes": 1048576},
	"secrets": {"token": "` + secretValue + `"}, "parameters": {"tier": "fast"},
	"access_mode": "single-node-writer", "mount_options": {"mount_flags": ["noatime"]}}`

func TestTheControllerRoutesEndToEndWithTheHostpathPlugin(t *testing.T) {
	f := newAPIFixture(t)
	srv := hostpathtest.Serve(t, hostpath.Config{NodeID: "node-1", Root: hostpathtest.TempDir(t)})
	f.registerController("hostpath", srv.Endpoint)

	var v api.ManagedVolumeJSON
	f.call("POST", "/v1/volumes/default/db/create", createBody, http.StatusCreated, &v)
	require.Equal(t, "db", v.ID)
	require.NotEmpty(t, v.ExternalID)
	require.Equal(t, int64(1<<20), v.CapacityBytes)
	require.Equal(t, []string{"token"}, v.SecretKeys, "secrets show as their keys only")
	require.True(t, v.Created)
	require.Equal(t, &api.MountOptionsJSON{MountFlags: []string{"noatime"}}, v.MountOptions)
	f.call("GET", "/v1/volumes/default/db", "", http.StatusOK, nil)
	f.call("GET", "/v1/volumes", "", http.StatusOK, nil)

	var expanded api.ExpandJSON
	f.call("POST", "/v1/volumes/default/db/expand", `{"required_bytes": 2097152}`, http.StatusOK, &expanded)
	require.Equal(t, int64(2<<20), expanded.CapacityBytes)
	require.Equal(t, int64(2<<20), expanded.Volume.CapacityBytes)
	require.True(t, expanded.NodeExpansionRequired)
	require.False(t, expanded.NodeExpanded, "published on no node: nothing to expand on the nodes")

	var snap api.SnapshotJSON
	f.call("POST", "/v1/snapshots", `{"volume_id": "db", "name": "nightly"}`, http.StatusCreated, &snap)
	require.Equal(t, v.ExternalID, snap.SourceVolumeID)
	var list struct {
		Snapshots []api.SnapshotJSON `json:"snapshots"`
	}
	f.call("GET", "/v1/snapshots?volume_id=db", "", http.StatusOK, &list)
	require.Equal(t, []api.SnapshotJSON{snap}, list.Snapshots)

	var copied api.ManagedVolumeJSON
	f.call("POST", "/v1/volumes/default/db-copy/create",
		`{"plugin_id": "hostpath", "access_mode": "single-node-writer", "snapshot_id": "`+snap.SnapshotID+`"}`, http.StatusCreated, &copied)
	require.Equal(t, int64(2<<20), copied.CapacityBytes, "a volume from a snapshot is at least the snapshot's size")

	// A registered (not created) volume is only forgotten by DELETE.
	f.call("POST", "/v1/volumes", `{"id": "legacy", "plugin_id": "hostpath", "access_mode": "single-node-writer", "attachment_mode": "file-system"}`, http.StatusOK, nil)
	var gone map[string]string
	f.call("DELETE", "/v1/volumes/default/legacy", "", http.StatusOK, &gone)
	require.Equal(t, "legacy", gone["deregistered"])

	f.call("DELETE", "/v1/snapshots/hostpath/"+snap.SnapshotID, "", http.StatusOK, nil)
	f.call("DELETE", "/v1/volumes/default/db-copy", "", http.StatusOK, &gone)
	require.Equal(t, "db-copy", gone["deleted"])
	f.call("DELETE", "/v1/volumes/default/db", "", http.StatusOK, &gone)
	require.Equal(t, "db", gone["deleted"])
	stubs, err := f.cat.ListVolumes(context.Background(), "")
	require.NoError(t, err)
	require.Empty(t, stubs)
}

func TestBadRequestsAreRefusedWithTheFieldNamedAndChangeNothing(t *testing.T) {
	f := newAPIFixture(t)
	m := csitest.NewMocks(t) // no RPC is expected: any fails the test
	socket := csitest.SocketPath(t)
	m.Serve(t, socket)
	f.registerController("hostpath", socket)
	cases := []struct {
		name, method, path, body, want string
	}{
		{"an unknown field", "POST", "/v1/volumes/default/db/create", `{"plugin_id": "hostpath", "size": 5}`, `unknown field "size"`},
		{"data after the object", "POST", "/v1/volumes/default/db/create", createBody + `{}`, "data after the JSON object"},
		{"a size of the wrong type", "POST", "/v1/volumes/default/db/create", `{"capacity": {"required_bytes": "1G"}}`, `"capacity.required_bytes"`},
		{"an empty body", "POST", "/v1/volumes/default/db/create", ``, "empty"},
		{"an unknown access mode", "POST", "/v1/volumes/default/db/create", `{"plugin_id": "hostpath", "access_mode": "all"}`, "access_mode"},
		{"a negative size", "POST", "/v1/volumes/default/db/create",
			`{"plugin_id": "hostpath", "access_mode": "single-node-writer", "capacity": {"required_bytes": -1}}`, "capacity.required_bytes"},
		{"no plugin", "POST", "/v1/volumes/default/db/create", `{"access_mode": "single-node-writer"}`, "plugin_id"},
		{"an fs type on a block device", "POST", "/v1/volumes/default/db/create",
			`{"plugin_id": "hostpath", "access_mode": "single-node-writer", "attachment_mode": "block-device", "mount_options": {"fs_type": "ext4"}}`, "fs type"},
		{"an expand without a size", "POST", "/v1/volumes/default/db/expand", `{"limit_bytes": 0}`, "capacity.required_bytes"},
		{"an expand with two objects", "POST", "/v1/volumes/default/db/expand", `{"required_bytes": 5} {"required_bytes": 6}`, "data after"},
		{"a snapshot without a name", "POST", "/v1/snapshots", `{"volume_id": "db"}`, "name"},
		{"a snapshot with an unknown field", "POST", "/v1/snapshots", `{"volume_id": "db", "name": "n", "force": true}`, `unknown field "force"`},
		{"an unknown query parameter", "GET", "/v1/snapshots?plugin=hostpath", ``, `unknown parameter "plugin"`},
		{"a repeated query parameter", "GET", "/v1/snapshots?plugin_id=a&plugin_id=b", ``, `"plugin_id" is given 2 times`},
		{"deregister_only that is not a boolean", "DELETE", "/v1/volumes/default/db?deregister_only=maybe", ``, "deregister_only"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := f.do(c.method, c.path, c.body)
			require.Equal(t, http.StatusBadRequest, code, body)
			require.Contains(t, errorOf(t, body), c.want)
			stubs, err := f.cat.ListVolumes(context.Background(), "")
			require.NoError(t, err)
			require.Empty(t, stubs, "nothing changed")
		})
	}
	code, _ := f.do("PUT", "/v1/snapshots", `{}`)
	require.Equal(t, http.StatusMethodNotAllowed, code)
}

func TestAPluginsAnswerMapsToItsOwnStatusNever500(t *testing.T) {
	cases := map[codes.Code]int{
		codes.NotFound:           http.StatusNotFound,
		codes.AlreadyExists:      http.StatusConflict,
		codes.FailedPrecondition: http.StatusConflict,
		codes.ResourceExhausted:  http.StatusInsufficientStorage,
		codes.Unavailable:        http.StatusServiceUnavailable,
		codes.DeadlineExceeded:   http.StatusGatewayTimeout,
		codes.InvalidArgument:    http.StatusBadRequest,
		codes.Unimplemented:      http.StatusNotImplemented,
		codes.Internal:           http.StatusBadGateway,
	}
	for code, want := range cases {
		t.Run(code.String(), func(t *testing.T) {
			f := newAPIFixture(t)
			m := csitest.NewMocks(t)
			socket := csitest.SocketPath(t)
			m.Serve(t, socket)
			f.registerController("hostpath", socket)
			gomock.InOrder(
				m.Controller.EXPECT().ControllerGetCapabilities(gomock.Any(), gomock.Any()).Return(&csipb.ControllerGetCapabilitiesResponse{
					Capabilities: []*csipb.ControllerServiceCapability{{Type: &csipb.ControllerServiceCapability_Rpc{
						Rpc: &csipb.ControllerServiceCapability_RPC{Type: csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME}}}},
				}, nil),
				m.Controller.EXPECT().CreateVolume(gomock.Any(), gomock.Any()).Return(nil, status.Error(code, "the plugin says no")),
			)
			status, body := f.do("POST", "/v1/volumes/default/db/create", createBody)
			require.Equal(t, want, status, body)
			require.Contains(t, body, "the plugin says no", "the plugin's message reaches the caller")
		})
	}
}

func TestControllerRoutesWithoutAControllerPluginSayWhatIsMissing(t *testing.T) {
	f := newAPIFixture(t)
	code, body := f.do("POST", "/v1/volumes/default/db/create", createBody)
	require.Equal(t, http.StatusNotFound, code, "the plugin the caller named is not there")
	require.Contains(t, errorOf(t, body), `no controller plugin: "hostpath" is not registered as csi-controller`)
	require.Contains(t, f.logs.String(), "[INFO]  request refused")
	require.NotContains(t, f.logs.String(), "[ERROR]", "a caller's mistake is not the agent's error")
	code, body = f.do("POST", "/v1/volumes/default/db/expand", `{"required_bytes": 5}`)
	require.Equal(t, http.StatusNotFound, code, "no such volume")
	require.Contains(t, body, "volume not found")
}

// errorOf is the message of an API error answer.
func errorOf(t *testing.T, body string) string {
	t.Helper()
	var answer struct {
		Error string `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &answer), body)
	return answer.Error
}
