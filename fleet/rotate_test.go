package fleet_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

// TestAFleetMovesToAKeyringAndRotatesIt follows a fleet written without a
// keyring as it moves to one: an agent with the keyring refuses its
// unsealed records (unless told to accept them for the move), keyring
// rotate seals every record with the key, keeping the fingerprints' lease,
// after which the keyed agent reads everything and one without the
// keyring reads nothing; a new primary key and a second rotate seal every
// record with it, so that the first key can go.
func TestAFleetMovesToAKeyringAndRotatesIt(t *testing.T) {
	srv := etcdtest.Start(t)
	plain := open(t, srv, "node-a")
	healthyNode(t, plain)
	_, err := plain.Claim(testCtx(t), "", registered(t, plain, volume("db", model.AccessModeSingleNodeWriter)).ID, writeClaim("web-1", "node-a"))
	require.NoError(t, err)

	path := filepath.Join(t.TempDir(), "keyring")
	first, err := fleet.GenerateKey(path)
	require.NoError(t, err)
	k1, err := fleet.LoadKeyring(path)
	require.NoError(t, err)
	keyed := open(t, srv, "node-b", func(c *fleet.Config) { c.Keyring = k1 })
	_, err = keyed.GetVolume(testCtx(t), "", "db")
	require.ErrorIs(t, err, fleet.ErrUnsealed, "a record the keyring did not seal is refused")
	moving := open(t, srv, "node-c", func(c *fleet.Config) { c.Keyring, c.AcceptUnsealed = k1, true })
	_, err = moving.GetVolume(testCtx(t), "", "db")
	require.NoError(t, err)

	res, err := fleet.RotateRecords(testCtx(t), fleet.Access{Endpoints: srv.Endpoints()}, "", k1)
	require.NoError(t, err)
	require.Positive(t, res.Resealed)
	v, err := keyed.GetVolume(testCtx(t), "", "db")
	require.NoError(t, err)
	require.Contains(t, v.WriteClaims, "web-1")
	require.Equal(t, 1, v.Health.NodesHealthy, "node-a's fingerprint, sealed again, kept its lease")
	_, err = plain.GetVolume(testCtx(t), "", "db")
	require.ErrorIs(t, err, model.ErrCorrupt, "an agent without the keyring reads no sealed record")
	require.ErrorContains(t, err, "-cluster-keyring")

	second, err := fleet.GenerateKey(path)
	require.NoError(t, err)
	k2, err := fleet.LoadKeyring(path)
	require.NoError(t, err)
	require.Equal(t, []string{second, first}, k2.IDs())
	res, err = fleet.RotateRecords(testCtx(t), fleet.Access{Endpoints: srv.Endpoints()}, "", k2)
	require.NoError(t, err)
	require.Positive(t, res.Resealed)
	res, err = fleet.RotateRecords(testCtx(t), fleet.Access{Endpoints: srv.Endpoints()}, "", k2)
	require.NoError(t, err)
	require.Zero(t, res.Resealed, "every record is sealed with the primary")
	require.Positive(t, res.Sealed)
	require.Positive(t, res.Skipped, "the node index and the members' keys are no records")
}
