package model

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseAccessModeTakesExactlyTheFiveSpellings(t *testing.T) {
	for _, s := range []string{
		"single-node-reader-only", "single-node-writer", "multi-node-reader-only",
		"multi-node-single-writer", "multi-node-multi-writer",
	} {
		m, err := ParseAccessMode(s)
		require.NoError(t, err, s)
		require.Equal(t, AccessMode(s), m)
		require.NoError(t, m.Validate())
	}
	for _, s := range []string{"", "single-node-reader", "Single-Node-Writer", " multi-node-multi-writer", "rw"} {
		m, err := ParseAccessMode(s)
		require.ErrorIs(t, err, ErrUnknownAccessMode, s)
		require.Empty(t, m)
		require.ErrorContains(t, err, `unknown access mode "`+s+`" (want one of single-node-reader-only,`)
		require.ErrorIs(t, AccessMode(s).Validate(), ErrUnknownAccessMode)
	}
}

func TestParseAttachmentModeTakesExactlyTheTwoSpellings(t *testing.T) {
	for _, s := range []string{"block-device", "file-system"} {
		m, err := ParseAttachmentMode(s)
		require.NoError(t, err, s)
		require.Equal(t, AttachmentMode(s), m)
		require.NoError(t, m.Validate())
	}
	m, err := ParseAttachmentMode("filesystem")
	require.Empty(t, m)
	require.EqualError(t, err, `unknown attachment mode "filesystem" (want one of block-device, file-system)`)
	require.ErrorIs(t, err, ErrUnknownAttachmentMode)
	require.ErrorIs(t, AttachmentMode("").Validate(), ErrUnknownAttachmentMode)
}

func TestAccessModeRules(t *testing.T) {
	cases := []struct {
		mode       AccessMode
		readOnly   bool
		singleNode bool
		maxWriters int
	}{
		{AccessModeSingleNodeReader, true, true, 0},
		{AccessModeSingleNodeWriter, false, true, 1},
		{AccessModeMultiNodeReader, true, false, 0},
		{AccessModeMultiNodeSingleWriter, false, false, 1},
		{AccessModeMultiNodeMultiWriter, false, false, int(^uint(0) >> 1)},
		{"unknown", true, false, 0},
	}
	for _, tc := range cases {
		t.Run(string(tc.mode), func(t *testing.T) {
			require.Equal(t, tc.readOnly, tc.mode.ReadOnly())
			require.Equal(t, tc.singleNode, tc.mode.SingleNode())
			require.Equal(t, tc.maxWriters, tc.mode.MaxWriters())
		})
	}
}

func TestClaimModesStatesAndPluginTypesValidate(t *testing.T) {
	for _, m := range []ClaimMode{ClaimModeRead, ClaimModeWrite} {
		require.NoError(t, m.Validate())
	}
	require.ErrorIs(t, ClaimMode("both").Validate(), ErrUnknownClaimMode)
	for _, s := range []ClaimState{ClaimStateTaken, ClaimStateUnpublishing, ClaimStateNodeDetached,
		ClaimStateControllerDetached, ClaimStateReadyToFree} {
		require.NoError(t, s.Validate())
	}
	require.ErrorIs(t, ClaimState("gone").Validate(), ErrUnknownClaimState)
	for _, p := range []PluginType{PluginTypeController, PluginTypeNode, PluginTypeMonolith} {
		require.NoError(t, p.Validate())
	}
	require.ErrorIs(t, PluginType("").Validate(), ErrUnknownPluginType)
	require.NoError(t, readClaim("a1", "n1").Validate())
	require.ErrorIs(t, (*Claim)(nil).Validate(), ErrInvalidClaim)
}
