package agent_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/api"
)

// TestExpandingAMountedVolumeExpandsItOnTheNodeToo creates a volume with
// the reference plugin through the agent's API, mounts it, and expands it:
// the controller expands it, the node plugin is asked to finish
// (NodeExpandVolume), the catalog holds the new capacity, and the volume's
// status carries the node plugin's stats.
func TestExpandingAMountedVolumeExpandsItOnTheNodeToo(t *testing.T) {
	dir := dataDir(t)
	a := startAgent(t, dir)
	registerHostpath(t, a, dir)
	c := unixClient(t, a)
	do := func(method, path, body string, want int, out any) {
		t.Helper()
		code, got, err := call(c, method, "http://plugvisor"+path, "", body)
		require.NoError(t, err)
		require.Equal(t, want, code, "%s %s answered %s", method, path, got)
		if out != nil {
			require.NoError(t, json.Unmarshal([]byte(got), out))
		}
	}
	ctx := context.Background()
	do("POST", "/v1/volumes/default/db/create",
		`{"plugin_id": "hp", "capacity": {"required_bytes": 1048576}, "access_mode": "single-node-writer"}`, http.StatusCreated, nil)
	require.Eventually(t, func() bool {
		v, err := a.Catalog().GetVolume(ctx, "default", "db")
		return err == nil && v.Schedulable
	}, 20*time.Second, 10*time.Millisecond)

	var expanded api.ExpandJSON
	do("POST", "/v1/volumes/default/db/expand", `{"required_bytes": 1572864}`, http.StatusOK, &expanded)
	require.True(t, expanded.NodeExpansionRequired)
	require.False(t, expanded.NodeExpanded, "a volume published on no node has nothing to expand on the nodes")

	var mounted api.MountJSON
	do("POST", "/v1/volumes/default/db/mount", `{"alloc_id": "web-1"}`, http.StatusOK, &mounted)
	require.NoError(t, os.WriteFile(filepath.Join(mounted.TargetPath, "f"), []byte("x"), 0o644))

	do("POST", "/v1/volumes/default/db/expand", `{"required_bytes": 2097152}`, http.StatusOK, &expanded)
	require.Equal(t, int64(2<<20), expanded.CapacityBytes)
	require.True(t, expanded.NodeExpansionRequired)
	require.True(t, expanded.NodeExpanded, "the node plugin expanded the mounted volume")
	v, err := a.Catalog().GetVolume(ctx, "default", "db")
	require.NoError(t, err)
	require.Equal(t, int64(2<<20), v.CapacityBytes, "the catalog holds the new capacity")

	var st api.StatusJSON
	do("GET", "/v1/volumes/default/db/status", "", http.StatusOK, &st)
	require.Empty(t, st.StatsError)
	require.NotNil(t, st.Stats, "the reference plugin advertises GET_VOLUME_STATS")
	require.Equal(t, mounted.TargetPath, st.Stats.VolumePath)
	units := map[string]api.UsageJSON{}
	for _, u := range st.Stats.Usage {
		units[u.Unit] = u
	}
	require.Contains(t, units, "bytes")
	require.Positive(t, units["bytes"].Total)

	do("POST", "/v1/volumes/default/db/unmount", `{"alloc_id": "web-1"}`, http.StatusOK, nil)
	var after api.StatusJSON
	do("GET", "/v1/volumes/default/db/status", "", http.StatusOK, &after)
	require.Nil(t, after.Stats, "an unmounted volume has no node stats")
	do("DELETE", "/v1/volumes/default/db", "", http.StatusOK, nil)
	require.NoError(t, a.Shutdown(ctx))
	require.Empty(t, mountsUnder(t, dir), "no mount is left under the data dir")
}
