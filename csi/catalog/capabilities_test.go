package catalog_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
)

// catCapVolume is volume id of plugin hostpath that can be used as a
// single writer or as a reader on many nodes.
func catCapVolume(id string) *model.CSIVolume {
	v := model.NewCSIVolume(id, 0)
	v.PluginID = "hostpath"
	v.SetCapabilities([]model.RequestedCapability{
		{AccessMode: model.AccessModeMultiNodeSingleWriter, AttachmentMode: model.AttachmentModeFileSystem, FSType: "ext4"},
		{AccessMode: model.AccessModeMultiNodeReader, AttachmentMode: model.AttachmentModeFileSystem},
	})
	return v
}

func catClaimAs(volume, alloc string, readOnly bool, access model.AccessMode) csi.ClaimRequest {
	r := catClaim(volume, alloc, readOnly)
	r.Usage.AccessMode = access
	return r
}

func TestCatalogClaimsChooseOneOfAVolumesCapabilitiesAndKeepItAcrossARestart(t *testing.T) {
	ctx := context.Background()
	catTwoRuns(t, []*messages.CSIFingerprint{catNodeFingerprint("hostpath", "p1", true)}, func(t *testing.T, f *catFixture) {
		got := f.register(catCapVolume("db"))
		require.Len(t, got.Capabilities(), 2)
		require.Equal(t, model.AccessModeMultiNodeSingleWriter, got.AccessMode, "the first capability is the volume's modes")

		before := f.dump()
		err := f.cat.Claim(ctx, catClaim("db", "r0", true))
		require.ErrorIs(t, err, model.ErrInvalidClaim)
		require.ErrorContains(t, err, "has 2 capabilities that fit the claim by alloc r0")
		err = f.cat.Claim(ctx, catClaimAs("db", "r0", true, model.AccessModeSingleNodeReader))
		require.ErrorIs(t, err, model.ErrClaimRefused)
		require.ErrorContains(t, err, "as file-system multi-node-single-writer or file-system multi-node-reader-only; alloc r0 asked for it through plugin \"\" as any attachment single-node-reader-only")
		err = f.cat.Claim(ctx, catClaimAs("db", "w0", false, model.AccessModeMultiNodeReader))
		require.ErrorIs(t, err, model.ErrWriteClaimRefused)
		require.Equal(t, before, f.dump(), "refused claims change nothing")

		require.NoError(t, f.cat.Claim(ctx, catClaimAs("db", "w1", false, model.AccessModeMultiNodeSingleWriter)))
		require.NoError(t, f.cat.Claim(ctx, catClaimAs("db", "r1", true, model.AccessModeMultiNodeReader)))
		require.ErrorIs(t, f.cat.Claim(ctx, catClaimAs("db", "w2", false, model.AccessModeMultiNodeSingleWriter)), model.ErrVolumeMaxClaims)
	}, "second run", func(t *testing.T, f *catFixture) {
		v := f.volume("", "db")
		require.Len(t, v.Capabilities(), 2)
		require.Equal(t, "ext4", v.Capabilities()[0].FSType)
		require.Equal(t, model.AccessModeMultiNodeReader, v.ReadClaims["r1"].AccessMode, "a claim keeps its capability on disk")
		require.Equal(t, model.AccessModeMultiNodeSingleWriter, v.WriteClaims["w1"].AccessMode)
		f.feed(catNodeFingerprint("hostpath", "p1", true))
		require.ErrorIs(t, f.cat.Claim(ctx, catClaimAs("db", "w2", false, model.AccessModeMultiNodeSingleWriter)), model.ErrVolumeMaxClaims,
			"the one-writer rule holds after a restart")
	})
}

func TestCatalogRefusesARegistrationWithBadCapabilitiesNamingTheField(t *testing.T) {
	f := startCatFixture(t, catMemoryBucket(t))
	v := catCapVolume("db")
	v.RequestedCapabilities = append(v.RequestedCapabilities,
		model.RequestedCapability{AccessMode: "many-writers", AttachmentMode: model.AttachmentModeFileSystem},
		v.RequestedCapabilities[1])
	before := f.dump()
	_, err := f.cat.RegisterVolume(context.Background(), v)
	require.ErrorIs(t, err, model.ErrInvalid)
	require.ErrorContains(t, err, `capabilities[2].access_mode: unknown access mode "many-writers"`)
	require.ErrorContains(t, err, "capabilities[3] repeats capabilities[1]")
	require.Equal(t, before, f.dump())
}
