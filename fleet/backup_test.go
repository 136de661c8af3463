package fleet_test

import (
	"net"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/embedded"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

// loopbackURL is an http URL on a loopback port free a moment ago.
func loopbackURL(t testing.TB) *url.URL {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, l.Close())
	return &url.URL{Scheme: "http", Host: l.Addr().String()}
}

// TestASnapshotOfTheFleetRestoresIntoANewEtcd saves a snapshot of a live
// etcd holding a fleet's volumes and claims, compacts and defragments the
// live one, restores the snapshot into a new data directory, starts etcd
// on it, and reads the fleet's volumes back with their claims.
func TestASnapshotOfTheFleetRestoresIntoANewEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	a := open(t, srv, "node-a")
	healthyNode(t, a)
	ctx := testCtx(t)
	for _, id := range []string{"db", "logs"} {
		registered(t, a, volume(id, model.AccessModeSingleNodeWriter))
	}
	_, err := a.Claim(ctx, "", "db", writeClaim("alloc-a", "node-a"))
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "fleet.db")
	size, err := fleet.SaveSnapshot(ctx, fleet.Access{Endpoints: srv.Endpoints()}, file)
	require.NoError(t, err)
	require.Positive(t, size)
	_, err = fleet.SaveSnapshot(ctx, fleet.Access{Endpoints: srv.Endpoints()}, file)
	require.ErrorContains(t, err, "exists", "a snapshot never overwrites a file")
	require.NoError(t, fleet.Defragment(ctx, fleet.Access{Endpoints: srv.Endpoints()}))

	dir := filepath.Join(t.TempDir(), "restored")
	client, peer := loopbackURL(t), loopbackURL(t)
	require.NoError(t, embedded.Restore(file, dir, peer))
	require.Error(t, embedded.Restore(file, dir, peer), "a restore never writes into an existing data directory")
	e, err := embedded.Start(embedded.Config{Dir: dir, Client: client, Peer: peer})
	require.NoError(t, err)
	t.Cleanup(e.Close)
	b, err := fleet.Open(ctx, fleet.Config{Endpoints: []string{client.String()}, NodeID: "node-b", LeaseTTL: fleet.MinLeaseTTL})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	stubs, err := b.ListVolumes(ctx, "")
	require.NoError(t, err)
	require.Len(t, stubs, 2)
	v, err := b.GetVolume(ctx, "", "db")
	require.NoError(t, err)
	require.Equal(t, []string{"alloc-a"}, v.Claimants(), "the claims come back with the volumes")
}
