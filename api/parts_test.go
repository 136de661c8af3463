package api_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/errclass"
)

// unavailableVolumes is a volume manager whose every call fails as a
// plugin that does not answer does.
type unavailableVolumes struct{ api.VolumeManager }

var errUnavailable = errclass.New(errclass.Unavailable, "the node plugin does not answer")

func (unavailableVolumes) Status(context.Context, string, string) (volumes.Status, error) {
	return volumes.Status{}, fmt.Errorf("%w: try again", errUnavailable)
}

// TestTheServerTakesThePartsAsInterfaces serves the API over a fake volume
// manager beside the real catalog: the Server takes each part as the
// interface of parts.go, so a test, or an embedder, gives its own.
func TestTheServerTakesThePartsAsInterfaces(t *testing.T) {
	f := newAPIFixture(t)
	handler := (&api.Server{Registry: f.reg, Catalog: f.cat, Volumes: unavailableVolumes{}, Logger: hclog.NewNullLogger()}).Handler()
	got := serve(t, handler, request{method: "GET", path: "/v1/volumes/default/db/status"})
	require.Equal(t, http.StatusServiceUnavailable, got.status, got.body)
	require.Equal(t, "the node plugin does not answer: try again", got.error(t))
}
