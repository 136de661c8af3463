package member

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/messages"
)

// keyringFile is a new keyring of one key.
func keyringFile(t *testing.T) *fleet.Keyring {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keyring")
	_, err := fleet.GenerateKey(path)
	require.NoError(t, err)
	k, err := fleet.LoadKeyring(path)
	require.NoError(t, err)
	return k
}

// TestAGrainWithAKeyringTakesOnlySignedRequests sends a volume's grain
// the requests an unauthenticated client of a member's port sent before
// (it asked the partition activator for the grain, then released a claim
// and forged another for node n2): unsigned, or signed with another
// keyring, each is refused as not signed and changes nothing; signed with
// the fleet's keyring, it goes through.
func TestAGrainWithAKeyringTakesOnlySignedRequests(t *testing.T) {
	s := etcdtest.Start(t)
	keyring := keyringFile(t)
	st := openStore(t, s, "a")
	system := probe.NewSystem(t)
	ctx, cancel := context.WithTimeout(context.Background(), grainTimeout)
	defer cancel()
	registerVolume(ctx, t, st, "db", model.AccessModeSingleNodeWriter)
	_, err := st.Claim(ctx, "", "db", &model.Claim{AllocID: "web-1", NodeID: "a", Mode: model.ClaimModeWrite, State: model.ClaimStateTaken})
	require.NoError(t, err)
	grain := spawnKeyedGrain(system, st, keyring, "member-a", "db")
	ask := func(msg proto.Message) error {
		res, err := system.Root.RequestFuture(grain, msg, grainTimeout).Result()
		require.NoError(t, err)
		return messages.ErrorFromProto(res.(*messages.FleetVolumeResponse).GetError())
	}

	release := &messages.FleetReleaseVolume{Claim: model.ClaimToProto(&model.Claim{AllocID: "web-1", State: model.ClaimStateReadyToFree})}
	forged := &messages.FleetClaimVolume{Claim: model.ClaimToProto(&model.Claim{AllocID: "evil", NodeID: "n2", Mode: model.ClaimModeWrite, State: model.ClaimStateTaken})}
	require.ErrorIs(t, ask(release), ErrUnsigned)
	other := proto.Clone(forged)
	require.NoError(t, sign(keyringFile(t), other))
	require.ErrorIs(t, ask(other), ErrUnsigned)
	tampered := proto.Clone(release).(*messages.FleetReleaseVolume)
	require.NoError(t, sign(keyring, tampered))
	tampered.Claim.AllocId = "someone-else"
	require.ErrorIs(t, ask(tampered), ErrUnsigned, "a signed request changed after signing")
	v, err := st.GetVolume(ctx, "", "db")
	require.NoError(t, err)
	require.Contains(t, v.WriteClaims, "web-1")
	require.NotContains(t, v.WriteClaims, "evil")

	require.NoError(t, sign(keyring, release))
	require.NoError(t, ask(release))
}
