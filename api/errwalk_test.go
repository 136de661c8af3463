package api_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/internal/errwalk"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/names"
	"github.com/plugvisor/plugvisor/registry"
)

// refusal is a request the API refuses, and what its answer must be.
type refusal struct {
	name, method, path, body string
	status                   int
	want                     string // a phrase of the message
}

// packagePrefix finds a segment of a message that is one of our packages'
// names: "registry: ...". The volume manager's ("volumes: ") and the
// fleet's are not in it yet: their turn is another change of issue 43's.
var packagePrefix = regexp.MustCompile(`(^|: )(api|csi|catalog|controller|registry|storage|discovery|dockervolume|supervisor|actors|names|plugintype|kubeletreg|agent|errclass|messages|volumes|fleet|member): `)

// walk sends each refusal and checks its answer: the status of its class,
// never a 500 (the status of an error of no class), a message that holds
// the phrase, says each thing once and starts no segment with a package's
// name.
func (f *apiFixture) walk(t *testing.T, cases []refusal) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body := f.do(c.method, c.path, c.body)
			msg := errorOf(t, body)
			require.Equal(t, c.status, status, msg)
			require.NotEqual(t, http.StatusInternalServerError, status, "a refusal is no 500: %s", msg)
			require.Contains(t, msg, c.want)
			require.Empty(t, errwalk.Repeated(msg), "%q says a thing twice", msg)
			require.False(t, packagePrefix.MatchString(msg), "%q names a package", msg)
		})
	}
}

// TestTheAPIsRefusalsSayEachThingOnce walks the refusals of every route
// family: plugins, volumes and claims, mounts, the controller path against
// the hostpath plugin (create, expand, delete, snapshots, capacity,
// modify), the Docker volume service, the plugin view and the router.
// Each answers its class's status with a message that repeats no word,
// prefix or phrase (internal/errwalk) and names no package.
func TestTheAPIsRefusalsSayEachThingOnce(t *testing.T) {
	f := newAPIFixture(t)
	srv := hostpathtest.Serve(t, hostpath.Config{NodeID: "node-1", Root: hostpathtest.TempDir(t)})
	f.registerController("hostpath", srv.Endpoint)
	f.call("POST", "/v1/volumes/default/db/create",
		`{"plugin_id": "hostpath", "access_mode": "single-node-writer", "capacity": {"required_bytes": 2097152}}`, http.StatusCreated, nil)
	f.call("POST", "/v1/volumes", `{"id": "held", "plugin_id": "hostpath", "access_mode": "multi-node-reader-only", "attachment_mode": "file-system"}`,
		http.StatusOK, nil)
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	volume := func(id, mode string) string {
		return `{"id":"` + id + `","plugin_id":"hostpath","access_mode":"` + mode + `","attachment_mode":"file-system"}`
	}

	t.Run("plugins", func(t *testing.T) {
		f.walk(t, []refusal{
			{"a socket path that is a file", "POST", "/v1/plugins",
				`{"type":"csi-node","name":"p","alloc_id":"a1","connection":{"socket_path":"` + file + `"}}`, 400, "is a regular file, not a socket"},
			{"a name with a separator", "POST", "/v1/plugins", registerBody("a/b", "a1"), 400, "path separator"},
			{"an address", "POST", "/v1/plugins", `{"type":"csi-node","name":"p","alloc_id":"a1","connection":{"address":"tcp://h:1"}}`,
				400, "unix socket only"},
			{"bad JSON", "POST", "/v1/plugins", `{"type":`, 400, "bad request body"},
			{"a type with a separator", "GET", "/v1/plugins?type=a/b", "", 400, "plugin type"},
			{"an unknown plugin", "GET", "/v1/plugins/csi-node/q", "", 404, "not registered"},
			{"an unknown allocation", "DELETE", "/v1/plugins/csi-node/q/a1", "", 404, "not found"},
		})
	})
	t.Run("volumes and claims", func(t *testing.T) {
		f.walk(t, []refusal{
			{"an unknown volume", "GET", "/v1/volumes/default/v1", "", 404, "volume not found"},
			{"a volume ID that climbs out", "GET", "/v1/volumes/default/a..b", "", 400, "must not contain"},
			{"a namespace with a separator", "GET", "/v1/volumes?namespace=a/b", "", 400, "namespace"},
			{"an unknown access mode", "POST", "/v1/volumes", volume("v2", "bogus"), 400, "unknown access mode"},
			{"a batch with a bad volume", "POST", "/v1/volumes:batch", `{"volumes":[` + volume("b0", "single-node-writer") + `,` +
				volume("b1", "sometimes") + `]}`, 400, `volumes[1] (volume "b1")`},
			{"a claim on an unknown volume", "POST", "/v1/volumes/default/v1/claim", `{"alloc_id":"a1","read_only":true}`, 404, "volume not found"},
			{"a claim by a bad alloc ID", "POST", "/v1/volumes/default/held/claim", `{"alloc_id":"a/1"}`, 400, "alloc ID"},
			{"a claim with no healthy node plugin", "POST", "/v1/volumes/default/held/claim", `{"alloc_id":"a2","read_only":true}`, 409,
				"not schedulable"},
			{"a release of an unknown volume", "POST", "/v1/volumes/default/v1/release", `{"alloc_id":"a1"}`, 404, "volume not found"},
			{"a deregistration of an unknown volume", "DELETE", "/v1/volumes/default/v1?deregister_only=true", "", 404, "volume not found"},
		})
	})
	t.Run("mounts", func(t *testing.T) {
		f.walk(t, []refusal{
			{"a mount of an unknown volume", "POST", "/v1/volumes/default/v1/mount", `{"alloc_id":"a1"}`, 404, "volume not found"},
			{"an unmount of a volume not mounted", "POST", "/v1/volumes/default/v1/unmount", `{"alloc_id":"a1"}`, 404, "not mounted"},
			{"a detach of an unknown volume", "POST", "/v1/volumes/default/v1/detach", `{"node_id":"n1"}`, 404, "volume not found"},
			{"the status of an unknown volume", "GET", "/v1/volumes/default/v1/status", "", 404, "volume not found"},
			{"a mount by a bad alloc ID", "POST", "/v1/volumes/default/db/mount", `{"alloc_id":".."}`, 400, "alloc ID"},
		})
	})
	t.Run("the controller path", func(t *testing.T) {
		f.walk(t, []refusal{
			{"a create without a controller", "POST", "/v1/volumes/default/v3/create",
				`{"plugin_id":"nope","access_mode":"single-node-writer","attachment_mode":"file-system"}`, 404, "no controller plugin"},
			{"a create of a volume held by another plugin", "POST", "/v1/volumes/default/db/create",
				`{"plugin_id":"other","access_mode":"single-node-writer"}`, 409, "volume exists"},
			{"a clone of an unknown volume", "POST", "/v1/volumes/default/db2/create",
				`{"plugin_id":"hostpath","access_mode":"single-node-writer","clone_from":"nope"}`, 404, "clone_from: volume not found"},
			{"a create from an unknown snapshot", "POST", "/v1/volumes/default/db2/create",
				`{"plugin_id":"hostpath","access_mode":"single-node-writer","snapshot_id":"nope"}`, 404, "CreateVolume: not found"},
			{"a create with no plugin", "POST", "/v1/volumes/default/db2/create", `{"access_mode":"single-node-writer"}`, 400, "plugin_id"},
			{"an expand of an unknown volume", "POST", "/v1/volumes/default/nope/expand", `{"required_bytes":5}`, 404, "volume not found"},
			{"an expand without a size", "POST", "/v1/volumes/default/db/expand", `{"limit_bytes":0}`, 400, "capacity.required_bytes"},
			{"a delete of an unknown volume", "DELETE", "/v1/volumes/default/nope", "", 404, "volume not found"},
			{"a snapshot of an unknown volume", "POST", "/v1/snapshots", `{"volume_id":"nope","name":"n"}`, 404, "volume not found"},
			{"a snapshot without a name", "POST", "/v1/snapshots", `{"volume_id":"db"}`, 400, "name"},
			{"a snapshot delete on no controller", "DELETE", "/v1/snapshots/nope/s1", "", 404, "no controller plugin"},
			{"a snapshot list of no controller", "GET", "/v1/snapshots?plugin_id=nope", "", 404, "no controller plugin"},
			{"the capacity of no controller", "GET", "/v1/csi/plugins/nope/capacity", "", 404, "no controller plugin"},
			{"a capacity of an old capability form", "GET", "/v1/csi/plugins/hostpath/capacity?capability=bogus", "", 400, "capability"},
			{"a modify of an unknown volume", "POST", "/v1/volumes/default/nope/modify", `{"mutable_parameters":{"tier":"fast"}}`,
				404, "volume not found"},
			{"a modify of an unknown parameter", "POST", "/v1/volumes/default/db/modify", `{"mutable_parameters":{"colour":"blue"}}`,
				400, "colour"},
		})
	})
	t.Run("the Docker volume service", func(t *testing.T) {
		f.walk(t, []refusal{
			{"an unknown volume", "GET", "/v1/docker/volumes/nope", "", 404, "no such volume"},
			{"a bad name", "POST", "/v1/docker/volumes", `{"name":"a/b","driver":"local"}`, 400, "path separator"},
			{"no driver and no local one", "POST", "/v1/docker/volumes", `{"name":"data"}`, 400, "default driver"},
			{"an unknown driver", "POST", "/v1/docker/volumes", `{"name":"data","driver":"nope"}`, 404, "nope"},
			{"a mount of an unknown volume", "POST", "/v1/docker/volumes/nope/mount", `{"id":"c1"}`, 404, "no such volume"},
			{"a mount by a bad ID", "POST", "/v1/docker/volumes/nope/mount", `{"id":"a b"}`, 400, "mount ID"},
			{"a removal of an unknown volume", "DELETE", "/v1/docker/volumes/nope", "", 404, "no such volume"},
			{"a CSI volume on a Docker plugin name", "POST", "/v1/volumes", volume("v9", "single-node-writer"), 200, ""},
		}[:7])
	})
	t.Run("the plugin view and the router", func(t *testing.T) {
		f.walk(t, []refusal{
			{"an unknown plugin", "GET", "/v1/csi/plugins/nope", "", 404, "plugin not found"},
			{"a negative expectation", "PUT", "/v1/csi/plugins/nope/expect", `{"nodes":-1}`, 400, "nodes is -1"},
			{"no fleet", "GET", "/v1/fleet/nodes", "", 404, "not in a fleet"},
			{"no discovery", "GET", "/v1/discovery/plugins", "", 404, "no discovery"},
			{"an unknown endpoint", "GET", "/v1/nowhere", "", 404, "no such endpoint"},
			{"a wrong method", "PUT", "/v1/plugins", "", 405, "method not allowed"},
			{"an unknown query parameter", "GET", "/v1/snapshots?plugin=hostpath", "", 400, `unknown parameter "plugin"`},
			{"a repeated query parameter", "GET", "/v1/volumes?namespace=a&namespace=b", "", 400, "given 2 times"},
			{"a body over the limit", "POST", "/v1/plugins", `{"type":"` + strings.Repeat("a", 2<<20) + `"}`, 413, "limit"},
		})
	})
}

// TestAShutDownAgentAnswers503NotA500 shuts every part of the agent down,
// then asks each: a part that is gone is unavailable (503), which a caller
// may retry elsewhere, never an error of no class.
func TestAShutDownAgentAnswers503NotA500(t *testing.T) {
	f := newAPIFixture(t)
	ctx := context.Background()
	require.NoError(t, f.docker.Shutdown())
	require.NoError(t, f.vols.Shutdown(ctx))
	require.NoError(t, f.cat.Shutdown(ctx))
	require.NoError(t, f.reg.Shutdown())
	f.walk(t, []refusal{
		{"a registration", "POST", "/v1/plugins", registerBody("p", "a1"), 503, "shut down"},
		{"a deregistration", "DELETE", "/v1/plugins/csi-node/p/a1", "", 503, "shut down"},
		{"a volume list", "GET", "/v1/volumes", "", 503, "shut down"},
		{"a volume registration", "POST", "/v1/volumes",
			`{"id":"v1","plugin_id":"hostpath","access_mode":"single-node-writer","attachment_mode":"file-system"}`, 503, "shut down"},
		{"a claim", "POST", "/v1/volumes/default/v1/claim", `{"alloc_id":"a1"}`, 503, "shut down"},
		{"a mount", "POST", "/v1/volumes/default/v1/mount", `{"alloc_id":"a1"}`, 503, "shut down"},
		{"a Docker volume list", "GET", "/v1/docker/volumes", "", 503, "shut down"},
		{"a Docker volume mount", "POST", "/v1/docker/volumes/data/mount", `{"id":"c1"}`, 503, "shut down"},
	})
}

// TestTheGoFacadesRefusalsSayEachThingOnceAndKeepTheirChain walks the
// same refusals through the Go facades: one message each, and the chain
// whole (errors.Is and errors.As reach the names package's error through
// the registry's ErrInvalid).
func TestTheGoFacadesRefusalsSayEachThingOnceAndKeepTheirChain(t *testing.T) {
	f := newAPIFixture(t)
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))

	err := registry.ValidateRegistration(&messages.PluginInfo{Type: "csi-node", Name: "p", AllocId: "a1",
		Connection: &messages.ConnectionInfo{SocketPath: file}})
	require.ErrorIs(t, err, registry.ErrInvalid)
	require.ErrorIs(t, err, names.ErrNotSocket, "the chain is whole")
	require.ErrorIs(t, err, errclass.Invalid)
	var bad *names.Error
	require.ErrorAs(t, err, &bad)
	require.Equal(t, "socket path", bad.Field)

	_, err = f.cat.GetVolume(ctx, "default", "v1")
	require.ErrorIs(t, err, model.ErrVolumeNotFound)
	require.ErrorIs(t, err, errclass.NotFound)
	claimErr := f.cat.Claim(ctx, csi.ClaimRequest{Namespace: "default", VolumeID: "v1", AllocID: "a1"})
	require.ErrorIs(t, claimErr, model.ErrVolumeNotFound)
	badID := f.cat.Claim(ctx, csi.ClaimRequest{Namespace: "default", VolumeID: "v1", AllocID: "a/1"})
	require.ErrorIs(t, badID, errclass.Invalid)
	deregErr := f.reg.DeregisterPlugin("csi-node", "q", "a1")
	require.ErrorIs(t, deregErr, registry.ErrNotFound)

	badName := f.reg.RegisterPlugin(&messages.PluginInfo{Type: "csi-node", Name: "a/b", AllocId: "a1",
		Connection: &messages.ConnectionInfo{SocketPath: "/run/csi/a1.sock"}})
	require.ErrorIs(t, badName, registry.ErrInvalid)
	require.ErrorIs(t, badName, names.ErrInvalid)
	require.ErrorAs(t, badName, &bad)
	for _, err := range []error{err, claimErr, badID, deregErr, badName} {
		require.Empty(t, errwalk.Repeated(err.Error()), "%q says a thing twice", err)
		require.False(t, packagePrefix.MatchString(err.Error()), "%q names a package", err)
	}
	require.False(t, errors.Is(claimErr, errclass.Conflict), "a missing volume is no conflict")
}
