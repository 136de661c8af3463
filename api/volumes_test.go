package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/volumes"
)

// TestAPluginsAnswerMapsToAClearStatusNever500 checks the HTTP status of
// the errors a mount can end with, as they come back from the volume
// manager (a plugin's gRPC code travels as csi's sentinel).
func TestAPluginsAnswerMapsToAClearStatusNever500(t *testing.T) {
	plugin := func(sentinel error) error {
		return fmt.Errorf("volumes: mount: csi: NodeStageVolume: %w: the plugin's words", sentinel)
	}
	cases := []struct {
		name string
		err  error
		want int
	}{
		{"the plugin does not know the volume", plugin(csi.ErrNotFound), http.StatusNotFound},
		{"the plugin says it already exists", plugin(csi.ErrAlreadyExists), http.StatusConflict},
		{"the plugin refuses a precondition", plugin(csi.ErrFailedPrecondition), http.StatusConflict},
		{"the plugin is out of space", plugin(csi.ErrResourceExhausted), http.StatusInsufficientStorage},
		{"the plugin is unavailable", plugin(csi.ErrUnavailable), http.StatusServiceUnavailable},
		{"the plugin timed out", plugin(csi.ErrDeadlineExceeded), http.StatusGatewayTimeout},
		{"the plugin failed inside", plugin(csi.ErrInternal), http.StatusBadGateway},
		{"the plugin found the request invalid", plugin(csi.ErrInvalidArgument), http.StatusBadRequest},
		{"the operation passed its deadline", fmt.Errorf("%w: mount", volumes.ErrDeadline), http.StatusGatewayTimeout},
		{"a release while published", fmt.Errorf("%w: alloc a is mounted", volumes.ErrInUse), http.StatusConflict},
		{"a second writer", fmt.Errorf("%w: x", volumes.ErrClaimRefused), http.StatusConflict},
		{"an unmount with no mount", volumes.ErrNotMounted, http.StatusNotFound},
		{"an unknown volume", volumes.ErrVolumeNotFound, http.StatusNotFound},
		{"a bad ID", volumes.ErrInvalid, http.StatusBadRequest},
		{"a shut down manager", volumes.ErrShutDown, http.StatusServiceUnavailable},
		{"a node whose lease in the fleet is not held", volumes.ErrFenced, http.StatusServiceUnavailable},
		{"the plugin left its target busy", fmt.Errorf("%w: left /t mounted", volumes.ErrTargetBusy), http.StatusConflict},
		{"the store failed", volumes.ErrStore, http.StatusInternalServerError},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, statusOf(c.err))
		})
	}
}

// pluginFailures are every error a plugin's answer, or the client's talk
// with it, can end in (csi's sentinels), and what the volume manager
// makes of a plugin's behaviour.
var pluginFailures = []error{
	csi.ErrCanceled, csi.ErrUnknown, csi.ErrInvalidArgument, csi.ErrDeadlineExceeded, csi.ErrNotFound,
	csi.ErrAlreadyExists, csi.ErrPermissionDenied, csi.ErrResourceExhausted, csi.ErrFailedPrecondition,
	csi.ErrAborted, csi.ErrOutOfRange, csi.ErrUnimplemented, csi.ErrInternal, csi.ErrUnavailable,
	csi.ErrDataLoss, csi.ErrUnauthenticated, csi.ErrInvalidResponse, csi.ErrConnect, csi.ErrClosed,
	volumes.ErrTargetBusy, volumes.ErrPluginNotFound, volumes.ErrDeadline,
}

// TestEveryPluginFailureIsADocumentedStatusNot500 maps each way a plugin
// can fail, as a volume operation and as a controller operation ends in
// it, to a status the README documents for plugins: never a 500, which
// means the agent itself failed.
func TestEveryPluginFailureIsADocumentedStatusNot500(t *testing.T) {
	documented := []int{400, 403, 404, 409, 501, 502, 503, 504, 507}
	for _, sentinel := range pluginFailures {
		for _, op := range []string{"volumes: mount: csi: NodeStageVolume", "controller: create: csi: CreateVolume"} {
			err := fmt.Errorf("%s: %w: the plugin's words", op, sentinel)
			require.Contains(t, documented, statusOf(err), "%v", err)
		}
	}
}

// TestBodiesAreDecodedStrictly checks that a body with trailing data or an
// unknown field is refused, the field named.
func TestBodiesAreDecodedStrictly(t *testing.T) {
	cases := []struct{ body, want string }{
		{`{"alloc_id":"a"} {"alloc_id":"b"}`, "data after the JSON object"},
		{`{"alloc_id":"a","release":true}`, `unknown field "release"`},
		{`{"Alloc_ID":"a"}`, `unknown field "Alloc_ID"`},
		{`null`, "send a JSON object"},
	}
	for _, c := range cases {
		r := httptest.NewRequest("POST", "/v1/volumes/default/v/mount", strings.NewReader(c.body))
		var body AllocBody
		err := decodeBody(httptest.NewRecorder(), r, &body, false)
		require.Error(t, err)
		require.True(t, errors.Is(err, errBadBody))
		require.Contains(t, err.Error(), c.want)
	}
}
