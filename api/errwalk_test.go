package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/internal/errwalk"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/names"
	"github.com/plugvisor/plugvisor/registry"
)

// TestTheAPIsRefusalsSayEachThingOnce walks the main refusals of the API:
// each answers its class's status with a message that repeats no word or
// prefix (internal/errwalk).
func TestTheAPIsRefusalsSayEachThingOnce(t *testing.T) {
	f := newAPIFixture(t)
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	cases := []struct {
		name, method, path, body string
		status                   int
		want                     string
	}{
		{"a socket path that is a file", "POST", "/v1/plugins",
			`{"type":"csi-node","name":"p","alloc_id":"a1","connection":{"socket_path":"` + file + `"}}`, 400, "is a regular file, not a socket"},
		{"a name with a separator", "POST", "/v1/plugins", registerBody("a/b", "a1"), 400, "path separator"},
		{"bad JSON", "POST", "/v1/plugins", `{"type":`, 400, "bad request body"},
		{"an unknown plugin", "GET", "/v1/plugins/csi-node/q", "", 404, "not registered"},
		{"an unknown allocation", "DELETE", "/v1/plugins/csi-node/q/a1", "", 404, "not found"},
		{"an unknown volume", "GET", "/v1/volumes/default/v1", "", 404, "volume not found"},
		{"a claim on an unknown volume", "POST", "/v1/volumes/default/v1/claim", `{"alloc_id":"a1","read_only":true}`, 404, "volume not found"},
		{"a volume with an unknown access mode", "POST", "/v1/volumes",
			`{"id":"v2","plugin_id":"hostpath","access_mode":"bogus","attachment_mode":"file-system"}`, 400, "unknown access mode"},
		{"a volume ID that climbs out", "GET", "/v1/volumes/default/a..b", "", 400, "must not contain"},
		{"a create without a controller", "POST", "/v1/volumes/default/v3/create",
			`{"plugin_id":"nope","access_mode":"single-node-writer","attachment_mode":"file-system"}`, 404, "controller"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body := f.do(c.method, c.path, c.body)
			var answer struct{ Error string }
			require.NoError(t, json.Unmarshal([]byte(body), &answer), body)
			require.Equal(t, c.status, status, body)
			require.Contains(t, answer.Error, c.want)
			require.Empty(t, errwalk.Repeated(answer.Error), "%q says a thing twice", answer.Error)
		})
	}
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
	}
	require.False(t, errors.Is(claimErr, errclass.Conflict), "a missing volume is no conflict")
}
