package model

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTheModelRefusesUnsafeNames(t *testing.T) {
	cases := []struct {
		name   string
		change func(v *CSIVolume)
		claim  *Claim
		want   error
		text   string
	}{
		{"a volume ID of one dot", func(v *CSIVolume) { v.ID = "." }, readClaim("a9", "n1"), ErrInvalidVolume, `ID must not be "."`},
		{"a namespace of two dots", func(v *CSIVolume) { v.Namespace = ".." }, readClaim("a9", "n1"), ErrInvalidVolume, `namespace ".." must not contain ".."`},
		{"a plugin ID with a right-to-left override", func(v *CSIVolume) { v.PluginID = "nf\u202Es" }, readClaim("a9", "n1"), ErrInvalidVolume, "bidirectional"},
		{"a claim whose alloc ID is a dot", func(*CSIVolume) {}, readClaim(".", "n1"), ErrInvalidClaim, `alloc ID must not be "."`},
		{"a claim whose node ID holds a zero-width space", func(*CSIVolume) {}, writeClaim("a9", "n\u200B1"), ErrInvalidClaim, "zero-width"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := healthyVolume(AccessModeMultiNodeMultiWriter)
			tc.change(v)
			before := v.Copy()
			err := v.Claim(tc.claim)
			require.ErrorIs(t, err, tc.want)
			require.ErrorContains(t, err, tc.text)
			require.Equal(t, before, v, "a refused claim must change nothing")
		})
	}
}

func TestFingerprintsWithUnsafeIDsAreRefused(t *testing.T) {
	p := NewCSIPlugin("ebs", 1)
	err := p.AddPlugin("n\u2066ode", fingerprint("a1", true, false, true))
	require.ErrorIs(t, err, ErrInvalidPlugin)
	require.ErrorContains(t, err, "bidirectional")
	require.True(t, p.IsEmpty(), "a refused fingerprint must change nothing")
}

// FuzzClaims drives one volume through a sequence of claims and releases
// decoded from the fuzzer's bytes. Whatever the sequence, every operation
// either succeeds and leaves a volume that passes Validate, or fails and
// changes nothing.
func FuzzClaims(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7}, uint8(0))
	f.Add([]byte{1, 1, 1, 9, 9, 9, 200, 13, 64}, uint8(1))
	f.Add([]byte("write then read then release"), uint8(4))
	modes := []AccessMode{AccessModeSingleNodeReader, AccessModeSingleNodeWriter, AccessModeMultiNodeReader,
		AccessModeMultiNodeSingleWriter, AccessModeMultiNodeMultiWriter}
	allocs := []string{"a1", "a2", "a3", ".", "a\u202E"}
	nodes := []string{"n1", "n2", ""}
	states := []ClaimState{ClaimStateTaken, ClaimStateNodeDetached, ClaimStateControllerDetached, ClaimStateReadyToFree, ClaimStateUnpublishing}
	f.Fuzz(func(t *testing.T, ops []byte, mode uint8) {
		v := healthyVolume(modes[int(mode)%len(modes)])
		for i := 0; i+1 < len(ops) && i < 64; i += 2 {
			op, arg := ops[i], ops[i+1]
			c := &Claim{
				AllocID: allocs[int(arg)%len(allocs)],
				NodeID:  nodes[int(arg/8)%len(nodes)],
				Mode:    []ClaimMode{ClaimModeRead, ClaimModeWrite}[int(arg/32)%2],
				State:   states[int(op/4)%len(states)],
			}
			before := v.Copy()
			var err error
			switch op % 4 {
			case 0:
				err = v.ClaimRead(c)
			case 1:
				err = v.ClaimWrite(c)
			case 2:
				err = v.ClaimRelease(c)
			case 3:
				v.GC(c.AllocID)
			}
			if err != nil {
				require.Equal(t, before, v, "a refused operation changed the volume")
				continue
			}
			require.NoError(t, v.Validate(), "operation %d left an invalid volume", op%4)
		}
	})
}
