package model

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/messages"
)

// capVolume returns a schedulable volume "db" with the given capabilities.
func capVolume(caps ...RequestedCapability) *CSIVolume {
	v := healthyVolume(caps[0].AccessMode)
	v.SetCapabilities(caps)
	return v
}

func fs(access AccessMode) RequestedCapability {
	return RequestedCapability{AccessMode: access, AttachmentMode: AttachmentModeFileSystem}
}

// as returns c choosing the capability of access mode access.
func as(c *Claim, access AccessMode) *Claim {
	c.AccessMode = access
	return c
}

// refuses checks that claim c on v fails matching kind and changes nothing.
func refuses(t *testing.T, v *CSIVolume, c *Claim, kind error, says string) {
	t.Helper()
	before := snapshot(t, v)
	err := v.Claim(c)
	require.ErrorIs(t, err, kind)
	require.ErrorContains(t, err, says)
	require.Equal(t, before, snapshot(t, v), "a refused claim changes nothing")
}

func TestAClaimOnAVolumeOfSeveralCapabilitiesMustNameOneOfThem(t *testing.T) {
	v := capVolume(fs(AccessModeMultiNodeSingleWriter), fs(AccessModeMultiNodeReader))
	refuses(t, v, readClaim("a1", "n1"), ErrInvalidClaim, "has 2 capabilities that fit the claim by alloc a1")
	refuses(t, v, as(readClaim("a1", "n1"), AccessModeSingleNodeReader), ErrInvalidClaim,
		"has no capability access=single-node-reader-only")
	refuses(t, v, &Claim{AllocID: "a1", NodeID: "n1", Mode: ClaimModeRead, State: ClaimStateTaken, AttachmentMode: AttachmentModeBlockDevice},
		ErrInvalidClaim, "must name one of {access=multi-node-single-writer,attachment=file-system}")

	require.NoError(t, v.Claim(as(readClaim("a1", "n1"), AccessModeMultiNodeReader)))
	require.Equal(t, AccessModeMultiNodeReader, v.ReadClaims["a1"].AccessMode)
	require.Equal(t, AttachmentModeFileSystem, v.ReadClaims["a1"].AttachmentMode, "the claim keeps the capability it chose")
	require.NoError(t, v.Validate())
}

func TestTheOneWriterRuleHoldsAcrossClaimsOfDifferentCapabilities(t *testing.T) {
	t.Run("a reader-only capability cannot write", func(t *testing.T) {
		v := capVolume(fs(AccessModeMultiNodeSingleWriter), fs(AccessModeMultiNodeReader))
		refuses(t, v, as(writeClaim("w", "n1"), AccessModeMultiNodeReader), ErrWriteClaimRefused, "is read-only as multi-node-reader-only")
	})
	t.Run("readers of another capability join a single writer", func(t *testing.T) {
		v := capVolume(fs(AccessModeMultiNodeSingleWriter), fs(AccessModeMultiNodeReader))
		require.NoError(t, v.Claim(as(writeClaim("w1", "n1"), AccessModeMultiNodeSingleWriter)))
		require.NoError(t, v.Claim(as(readClaim("r1", "n2"), AccessModeMultiNodeReader)))
		refuses(t, v, as(writeClaim("w2", "n3"), AccessModeMultiNodeSingleWriter), ErrVolumeMaxClaims, "already has a writer (alloc w1)")
		require.NoError(t, v.Validate())
	})
	t.Run("a single writer's capability caps the multi-writers", func(t *testing.T) {
		v := capVolume(fs(AccessModeMultiNodeMultiWriter), fs(AccessModeMultiNodeSingleWriter))
		require.NoError(t, v.Claim(as(writeClaim("w1", "n1"), AccessModeMultiNodeSingleWriter)))
		refuses(t, v, as(writeClaim("w2", "n2"), AccessModeMultiNodeMultiWriter), ErrVolumeMaxClaims, "already has a writer (alloc w1)")
	})
	t.Run("multi-writers leave no room for a single writer", func(t *testing.T) {
		v := capVolume(fs(AccessModeMultiNodeMultiWriter), fs(AccessModeMultiNodeSingleWriter))
		require.NoError(t, v.Claim(as(writeClaim("w1", "n1"), AccessModeMultiNodeMultiWriter)))
		require.NoError(t, v.Claim(as(writeClaim("w2", "n2"), AccessModeMultiNodeMultiWriter)))
		refuses(t, v, as(writeClaim("w3", "n3"), AccessModeMultiNodeSingleWriter), ErrVolumeMaxClaims, "already has a writer")
		require.NoError(t, v.Validate())
	})
	t.Run("a single-node capability keeps every claim on its node", func(t *testing.T) {
		v := capVolume(fs(AccessModeSingleNodeWriter), fs(AccessModeMultiNodeReader))
		require.NoError(t, v.Claim(as(writeClaim("w1", "n1"), AccessModeSingleNodeWriter)))
		refuses(t, v, as(readClaim("r1", "n2"), AccessModeMultiNodeReader), ErrNodeConflict, "is claimed on node n1")
		require.NoError(t, v.Claim(as(readClaim("r2", "n1"), AccessModeMultiNodeReader)))
	})
	t.Run("claims share one attachment mode", func(t *testing.T) {
		block := RequestedCapability{AccessMode: AccessModeMultiNodeReader, AttachmentMode: AttachmentModeBlockDevice}
		v := capVolume(fs(AccessModeMultiNodeReader), block)
		require.NoError(t, v.Claim(&Claim{AllocID: "r1", NodeID: "n1", Mode: ClaimModeRead, State: ClaimStateTaken, AttachmentMode: AttachmentModeFileSystem}))
		refuses(t, v, &Claim{AllocID: "r2", NodeID: "n2", Mode: ClaimModeRead, State: ClaimStateTaken, AttachmentMode: AttachmentModeBlockDevice},
			ErrCapabilityConflict, "is held as file-system by alloc r1")
		v.GC("r1")
		require.NoError(t, v.Claim(&Claim{AllocID: "r2", NodeID: "n2", Mode: ClaimModeRead, State: ClaimStateTaken, AttachmentMode: AttachmentModeBlockDevice}),
			"once released, the volume can be used the other way")
	})
}

func TestValidateNamesEachBadCapability(t *testing.T) {
	v := capVolume(fs(AccessModeSingleNodeWriter), fs(AccessModeSingleNodeWriter),
		RequestedCapability{AccessMode: "rw", AttachmentMode: AttachmentModeBlockDevice, FSType: "ext4"},
		RequestedCapability{AccessMode: AccessModeMultiNodeReader, AttachmentMode: AttachmentModeFileSystem, FSType: "ext4;rm"})
	v.AccessMode = AccessModeMultiNodeReader
	err := v.Validate()
	require.ErrorIs(t, err, ErrInvalidVolume)
	for _, want := range []string{
		"capabilities[1] repeats capabilities[0]",
		"capabilities[2].access_mode: unknown access mode \"rw\"",
		"capabilities[2].fs_type: a block-device capability takes no fs type",
		"capabilities[3].fs_type \"ext4;rm\" may hold only",
		"capabilities[0] (single-node-writer file-system) differs from the volume's access and attachment modes",
	} {
		require.ErrorContains(t, err, want)
	}
}

func TestARecordWithoutCapabilitiesDecodesToItsOneMode(t *testing.T) {
	old := &messages.CatalogVolume{Id: "db", Namespace: "default", PluginId: "ebs", AccessMode: string(AccessModeSingleNodeWriter),
		AttachmentMode: string(AttachmentModeFileSystem), MountOptions: &messages.CatalogMountOptions{FsType: "xfs"},
		WriteClaims: map[string]*messages.CatalogClaim{"a1": {AllocId: "a1", NodeId: "n1", Mode: "write", State: "taken"}}}
	v := VolumeFromProto(old)
	require.NoError(t, v.Validate())
	require.Equal(t, []RequestedCapability{{AccessMode: AccessModeSingleNodeWriter, AttachmentMode: AttachmentModeFileSystem, FSType: "xfs"}}, v.Capabilities())
	require.Equal(t, AccessModeSingleNodeWriter, v.capabilityOf(v.WriteClaims["a1"]).AccessMode, "an old claim uses the volume's modes")

	v2 := capVolume(fs(AccessModeMultiNodeSingleWriter), RequestedCapability{AccessMode: AccessModeMultiNodeReader, AttachmentMode: AttachmentModeFileSystem, FSType: "ext4"})
	require.NoError(t, v2.Claim(as(readClaim("r", "n1"), AccessModeMultiNodeReader)))
	back := VolumeFromProto(v2.Proto())
	require.True(t, back.Equal(v2))
	require.Equal(t, v2.ReadClaims, back.ReadClaims)
	require.Equal(t, "ext4", back.CapabilityFor(AccessModeMultiNodeReader, AttachmentModeFileSystem).GetMount().GetFsType())
	require.Len(t, back.CSICapabilities(), 2)
}

func TestParseCapabilityReadsWhatStringWritesAndNamesWhatIsWrong(t *testing.T) {
	for _, c := range []RequestedCapability{
		fs(AccessModeSingleNodeWriter),
		{AccessMode: AccessModeMultiNodeReader, AttachmentMode: AttachmentModeBlockDevice},
		{AccessMode: AccessModeSingleNodeReader, AttachmentMode: AttachmentModeFileSystem, FSType: "ext4"},
	} {
		got, err := ParseCapability(c.String())
		require.NoError(t, err)
		require.Equal(t, c, got)
	}
	got, err := ParseCapability("access=single-node-writer")
	require.NoError(t, err)
	require.Equal(t, fs(AccessModeSingleNodeWriter), got, "the attachment defaults to file-system")

	for in, want := range map[string]string{
		"access=sometimes": `access: unknown access mode "sometimes"`,
		"access=single-node-writer,attachment=floppy":              `attachment: unknown attachment mode "floppy"`,
		"single-node-writer/file-system":                           `"single-node-writer/file-system" is not KEY=VALUE`,
		"access=single-node-writer,colour=red":                     `unknown key "colour"`,
		"attachment=block-device":                                  "access=MODE is required",
		"access=single-node-writer,attachment=block-device,fs=xfs": "fs: a block-device capability takes no fs type",
		"access=single-node-writer,fs=e x":                         `fs "e x" may hold only`,
		"access=":                                                  `"access=" is not KEY=VALUE`,
	} {
		_, err := ParseCapability(in)
		require.ErrorIs(t, err, ErrInvalid, in)
		require.ErrorContains(t, err, want, in)
		require.ErrorContains(t, err, "the syntax is "+CapabilitySyntax, in)
	}
}
