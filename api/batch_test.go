package api_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
)

// batchBody is a POST /v1/volumes:batch body of the volumes ids, each
// single-node-writer on plugin hp unless mode says otherwise.
func batchBody(ids ...string) string {
	items := make([]string, len(ids))
	for i, id := range ids {
		mode := "single-node-writer"
		id, bad, ok := strings.Cut(id, ":")
		if ok {
			mode = bad
		}
		items[i] = `{"id":"` + id + `","plugin_id":"hp","access_mode":"` + mode + `","attachment_mode":"file-system"}`
	}
	return `{"volumes":[` + strings.Join(items, ",") + `]}`
}

func TestTheBatchRoutesRegisterAndDeregisterAllOrNothing(t *testing.T) {
	b, a := newCSIBackend(t, hostpathtest.TempDir(t))
	many := make([]string, model.MaxBatch+1)
	for i := range many {
		many[i] = fmt.Sprintf("m%d", i)
	}
	run(t, b, []step{
		{name: "a batch", method: "POST", path: "/v1/volumes:batch", body: batchBody("a", "b"), status: 200, want: `"id": "b"`},
		{name: "a bad item", method: "POST", path: "/v1/volumes:batch", body: batchBody("c", "d:sometimes"), status: 400,
			want: `volumes[1] (volume "d"): access_mode: unknown access mode "sometimes"`},
		{name: "a volume twice", method: "POST", path: "/v1/volumes:batch", body: batchBody("c", "e", "c"), status: 400,
			want: `volumes[2]: volume "c" in namespace "default" is volumes[0] too`},
		{name: "over the limit", method: "POST", path: "/v1/volumes:batch", body: batchBody(many...), status: 400,
			want: "26 volumes in one batch, over the limit of 25"},
		{name: "an empty batch", method: "POST", path: "/v1/volumes:batch", body: `{"volumes":[]}`, status: 400,
			want: "a batch needs at least one volume"},
		{name: "an unknown field", method: "POST", path: "/v1/volumes:batch", body: `{"volume":[]}`, status: 400, want: "volume"},
		{name: "an unknown volume", method: "POST", path: "/v1/volumes:deregister", body: `{"volume_ids":["a","zz"]}`, status: 404,
			want: `volumes[1] (volume "zz")`},
		{name: "a deregistration twice", method: "POST", path: "/v1/volumes:deregister", body: `{"volume_ids":["a","a"]}`, status: 400,
			want: `volumes[1]: volume "a" in namespace "default" is volumes[0] too`},
	})
	stubs, err := a.catalog.ListVolumes(context.Background(), "")
	require.NoError(t, err)
	require.Len(t, stubs, 2, "the refused batches changed nothing")

	run(t, b, []step{
		{name: "a batch deregistered", method: "POST", path: "/v1/volumes:deregister", body: `{"namespace":"default","volume_ids":["b","a"]}`,
			status: 200, want: `"deregistered"`},
	})
	stubs, err = a.catalog.ListVolumes(context.Background(), "")
	require.NoError(t, err)
	require.Empty(t, stubs)
}
