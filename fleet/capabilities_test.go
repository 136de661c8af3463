package fleet_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
)

// claimAs returns c choosing the volume's capability of access mode m.
func claimAs(c *model.Claim, m model.AccessMode) *model.Claim {
	c.AccessMode = m
	return c
}

func TestFleetClaimsOfDifferentCapabilitiesKeepOneWriterWhateverTheInterleaving(t *testing.T) {
	a, b, ctx := twoHealthyNodes(t)
	for round := range 5 {
		id := "db" + string(rune('a'+round))
		v := volume(id, model.AccessModeMultiNodeMultiWriter)
		v.SetCapabilities([]model.RequestedCapability{
			{AccessMode: model.AccessModeMultiNodeMultiWriter, AttachmentMode: model.AttachmentModeFileSystem},
			{AccessMode: model.AccessModeMultiNodeSingleWriter, AttachmentMode: model.AttachmentModeFileSystem},
		})
		registered(t, a, v)
		// A single writer and a multi-writer race: whichever comes first,
		// the single writer's capability allows no second writer.
		errs := make([]error, 2)
		var wg sync.WaitGroup
		wg.Go(func() {
			_, errs[0] = a.Claim(ctx, "", id, claimAs(writeClaim("single", "node-a"), model.AccessModeMultiNodeSingleWriter))
		})
		wg.Go(func() {
			_, errs[1] = b.Claim(ctx, "", id, claimAs(writeClaim("multi", "node-b"), model.AccessModeMultiNodeMultiWriter))
		})
		wg.Wait()
		won := 0
		for _, err := range errs {
			if err == nil {
				won++
				continue
			}
			require.ErrorIs(t, err, model.ErrVolumeMaxClaims)
		}
		require.Equal(t, 1, won, "round %d: one writer", round)
		got, err := b.GetVolume(ctx, "", id)
		require.NoError(t, err)
		require.NoError(t, got.Validate())
		for _, c := range got.WriteClaims {
			require.NotEmpty(t, c.AccessMode, "the claim in etcd keeps the capability it chose")
		}
	}
	before, err := a.GetVolume(ctx, "", "dba")
	require.NoError(t, err)
	_, err = a.Claim(ctx, "", "dba", readClaim("r", "node-a"))
	require.ErrorIs(t, err, model.ErrInvalidClaim)
	require.ErrorContains(t, err, "has 2 capabilities that fit the claim by alloc r")
	after, err := a.GetVolume(ctx, "", "dba")
	require.NoError(t, err)
	require.Equal(t, before.ModifyIndex, after.ModifyIndex, "a refused claim writes nothing")
}
