package api_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
)

// countingCatalog is a catalog that counts the server's GetVolume calls.
type countingCatalog struct {
	api.Catalog
	gets atomic.Int64
}

func (c *countingCatalog) GetVolume(ctx context.Context, namespace, id string) (*model.CSIVolume, error) {
	c.gets.Add(1)
	return c.Catalog.GetVolume(ctx, namespace, id)
}

// TestAClaimAndAReleaseAnswerWithWhatTheyWrote: the API answers a claim
// and a release with the volume as the claim or release left it, which
// the catalog handed back, not with a read of it afterwards (in a fleet,
// one more etcd round trip per call), and the answer is the volume that a
// read then gives.
func TestAClaimAndAReleaseAnswerWithWhatTheyWrote(t *testing.T) {
	dir := hostpathtest.TempDir(t)
	b, a := newCSIBackend(t, dir)
	serveHostpath(t, b, a, dir)
	run(t, b, []step{{name: "a volume", method: "POST", path: "/v1/volumes", status: 200, want: `"db"`,
		body: `{"id":"db","plugin_id":"hp","access_mode":"single-node-writer","attachment_mode":"file-system"}`}})
	require.Eventually(t, func() bool {
		v, err := a.catalog.GetVolume(context.Background(), "default", "db")
		return err == nil && v.Schedulable
	}, 20*time.Second, 20*time.Millisecond)
	counted := &countingCatalog{Catalog: a.catalog}
	b.server.Catalog = counted
	handler := b.server.HandlerFor(unixListener)

	for _, call := range []struct{ op, want string }{{"claim", `"web-1"`}, {"release", `"db"`}} {
		got := serve(t, handler, request{method: "POST", path: "/v1/volumes/default/db/" + call.op, body: `{"alloc_id":"web-1"}`})
		require.Equal(t, 200, got.status, got.body)
		require.Contains(t, got.body, call.want)
		require.Zero(t, counted.gets.Load(), "the %s's answer read the volume again", call.op)
		read := serve(t, handler, request{method: "GET", path: "/v1/volumes/default/db"})
		require.JSONEq(t, read.body, got.body, "the %s's answer is the volume as a read gives it", call.op)
		counted.gets.Store(0)
	}
}
