package volumes_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/csi/volumes"
)

// TestJobsShareOneConnectionPerSocketAndAFailedOneDropsIt holds a plugin's
// connection from two jobs: they share one. The first job failed and drops
// it; the second's RPCs still work on it, and only when the second lets go
// is it closed. The next job dials afresh.
func TestJobsShareOneConnectionPerSocketAndAFailedOneDropsIt(t *testing.T) {
	plugin := hostpathtest.Serve(t, hostpath.Config{Name: "hp", NodeID: "n1", Root: filepath.Join(hostpathtest.TempDir(t), "hp")})
	var conns volumes.Connections
	defer conns.Close()
	first, err := conns.Hold(ctx, plugin.Endpoint)
	require.NoError(t, err)
	second, err := conns.Hold(ctx, plugin.Endpoint)
	require.NoError(t, err)
	require.Same(t, first.Client(), second.Client(), "two jobs on one socket share its connection")

	conns.Release(first, true)
	_, err = second.Client().Probe(ctx)
	require.NoError(t, err, "a dropped connection stays open while another job holds it")

	third, err := conns.Hold(ctx, plugin.Endpoint)
	require.NoError(t, err)
	require.NotSame(t, second.Client(), third.Client(), "after a drop the next job dials afresh")

	conns.Release(second, false)
	_, err = second.Client().Probe(ctx)
	require.ErrorIs(t, err, csi.ErrClosed, "a dropped connection is closed when its last holder lets go")
	conns.Release(third, false)
	_, err = third.Client().Probe(ctx)
	require.NoError(t, err, "a connection nobody dropped stays open for the next job")
}
