package model

import (
	"fmt"
	"maps"
	"testing"

	"github.com/stretchr/testify/require"
)

// claimStep is one operation on a volume and the error each access mode
// answers it with; a mode missing from refusedBy must accept it.
type claimStep struct {
	name      string
	do        func(v *CSIVolume) error
	refusedBy map[AccessMode]error
}

func claimStepOf(c *Claim, refusedBy map[AccessMode]error) claimStep {
	return claimStep{
		name:      fmt.Sprintf("%s claim by %s on %s in state %s", c.Mode, c.AllocID, c.NodeID, c.State),
		do:        func(v *CSIVolume) error { return v.Claim(c) },
		refusedBy: refusedBy,
	}
}

func gcStep(alloc string) claimStep {
	return claimStep{
		name: "GC of " + alloc,
		do:   func(v *CSIVolume) error { v.GC(alloc); return nil },
	}
}

// refusedBy returns the answer err for each of modes.
func refusedBy(err error, modes ...AccessMode) map[AccessMode]error {
	out := map[AccessMode]error{}
	for _, m := range modes {
		out[m] = err
	}
	return out
}

var (
	// readOnlyModes refuse any writer.
	readOnlyModes = refusedBy(ErrWriteClaimRefused, AccessModeSingleNodeReader, AccessModeMultiNodeReader)
	// secondWriterRefused: single-writer modes refuse a second writer,
	// read-only modes any.
	secondWriterRefused = func() map[AccessMode]error {
		out := refusedBy(ErrVolumeMaxClaims, AccessModeSingleNodeWriter, AccessModeMultiNodeSingleWriter)
		maps.Copy(out, readOnlyModes)
		return out
	}()
	// singleNodeModes refuse a claim from a second node.
	singleNodeModes = refusedBy(ErrNodeConflict, AccessModeSingleNodeReader, AccessModeSingleNodeWriter)
	// noClaimHeld is what releasing answers in the read-only modes, where
	// the write claim it releases was refused.
	noClaimHeld = refusedBy(ErrClaimNotFound, AccessModeSingleNodeReader, AccessModeMultiNodeReader)
)

func TestClaimSequencesForEveryAccessMode(t *testing.T) {
	w1, w2 := writeClaim("a1", "n1"), writeClaim("a2", "n1")
	r1 := readClaim("a1", "n1")
	sequences := []struct {
		name  string
		steps []claimStep
	}{
		{"one reader is granted in every mode", []claimStep{
			claimStepOf(r1, nil),
		}},
		{"one writer is granted unless the mode is read-only", []claimStep{
			claimStepOf(w1, readOnlyModes),
		}},
		{"a reader then a writer from another alloc", []claimStep{
			claimStepOf(r1, nil),
			claimStepOf(w2, readOnlyModes),
		}},
		{"a writer then a reader from another alloc", []claimStep{
			claimStepOf(w1, readOnlyModes),
			claimStepOf(readClaim("a2", "n1"), nil),
		}},
		{"a second writer is refused unless the mode has many writers", []claimStep{
			claimStepOf(w1, readOnlyModes),
			claimStepOf(w2, secondWriterRefused),
		}},
		{"a second writer on another node", []claimStep{
			claimStepOf(w1, readOnlyModes),
			claimStepOf(writeClaim("a2", "n2"), secondWriterRefused),
		}},
		{"a second reader on another node is refused by single-node modes", []claimStep{
			claimStepOf(r1, nil),
			claimStepOf(readClaim("a2", "n2"), singleNodeModes),
		}},
		{"a writer that is still unpublishing keeps its writer slot", []claimStep{
			claimStepOf(w1, readOnlyModes),
			claimStepOf(moved(w1, ClaimStateUnpublishing), noClaimHeld),
			claimStepOf(w2, secondWriterRefused),
		}},
		{"a writer released step by step then freed lets another writer in", []claimStep{
			claimStepOf(w1, readOnlyModes),
			claimStepOf(moved(w1, ClaimStateUnpublishing), noClaimHeld),
			claimStepOf(moved(w1, ClaimStateNodeDetached), noClaimHeld),
			claimStepOf(moved(w1, ClaimStateControllerDetached), noClaimHeld),
			claimStepOf(moved(w1, ClaimStateReadyToFree), nil),
			claimStepOf(w2, readOnlyModes),
		}},
		{"a reader released on one node lets a reader in on another node", []claimStep{
			claimStepOf(r1, nil),
			claimStepOf(moved(r1, ClaimStateReadyToFree), nil),
			claimStepOf(readClaim("a2", "n2"), nil),
		}},
		{"a garbage-collected writer lets another writer in", []claimStep{
			claimStepOf(w1, readOnlyModes),
			gcStep("a1"),
			claimStepOf(w2, readOnlyModes),
		}},
		{"a garbage-collected reader lets a reader in on another node", []claimStep{
			claimStepOf(r1, nil),
			gcStep("a1"),
			claimStepOf(readClaim("a2", "n2"), nil),
		}},
		{"claiming the same read claim twice changes nothing", []claimStep{
			claimStepOf(r1, nil),
			claimStepOf(r1, nil),
		}},
		{"claiming the same write claim twice changes nothing", []claimStep{
			claimStepOf(w1, readOnlyModes),
			claimStepOf(w1, readOnlyModes),
		}},
		{"freeing a claim twice changes nothing", []claimStep{
			claimStepOf(r1, nil),
			claimStepOf(moved(r1, ClaimStateReadyToFree), nil),
			claimStepOf(moved(r1, ClaimStateReadyToFree), nil),
		}},
	}
	for _, seq := range sequences {
		for _, mode := range AccessModes() {
			t.Run(seq.name+"/"+string(mode), func(t *testing.T) {
				v := healthyVolume(mode)
				for i, step := range seq.steps {
					before := v.Copy()
					err := step.do(v)
					want := step.refusedBy[mode]
					if want == nil {
						require.NoError(t, err, "step %d: %s", i+1, step.name)
					} else {
						require.ErrorIs(t, err, want, "step %d: %s", i+1, step.name)
						require.Equal(t, before, v, "step %d: %s changed the volume", i+1, step.name)
					}
					require.NoError(t, v.Validate(), "step %d: %s", i+1, step.name)
				}
			})
		}
	}
}

func TestClaimStoresItsOwnCopyAndRoutesByMode(t *testing.T) {
	v := healthyVolume(AccessModeMultiNodeMultiWriter)
	r, w := readClaim("a1", "n1"), writeClaim("a2", "n2")
	require.NoError(t, v.Claim(r))
	require.NoError(t, v.Claim(w))
	require.Equal(t, map[string]*Claim{"a1": readClaim("a1", "n1")}, v.ReadClaims)
	require.Equal(t, map[string]*Claim{"a2": writeClaim("a2", "n2")}, v.WriteClaims)

	r.NodeID, w.NodeID = "changed", "changed"
	require.Equal(t, "n1", v.ReadClaims["a1"].NodeID, "the volume must keep its own copy of a claim")
	require.Equal(t, "n2", v.WriteClaims["a2"].NodeID, "the volume must keep its own copy of a claim")

	require.NoError(t, v.Claim(moved(writeClaim("a2", "n2"), ClaimStateUnpublishing)))
	require.Equal(t, map[string]*Claim{"a2": moved(writeClaim("a2", "n2"), ClaimStateUnpublishing)}, v.PastClaims)
	require.Contains(t, v.WriteClaims, "a2", "a claim being released keeps its place until it is freed")
	require.True(t, v.InUse())
}

func TestGCRemovesEveryClaimOfTheAlloc(t *testing.T) {
	v := healthyVolume(AccessModeMultiNodeMultiWriter)
	require.NoError(t, v.Claim(writeClaim("a1", "n1")))
	require.NoError(t, v.Claim(moved(writeClaim("a1", "n1"), ClaimStateUnpublishing)))
	require.NoError(t, v.Claim(readClaim("a2", "n1")))

	require.True(t, v.GC("a1"))
	require.Empty(t, v.WriteClaims)
	require.Empty(t, v.PastClaims)
	require.Len(t, v.ReadClaims, 1)

	require.False(t, v.GC("a1"), "a second GC finds nothing")
	require.False(t, v.GC("unknown"))
	require.True(t, v.GC("a2"))
	require.False(t, v.InUse())
}

func TestClaimsOnAVolumeWithoutClaimMapsMakeThem(t *testing.T) {
	v := healthyVolume(AccessModeSingleNodeWriter)
	v.ReadClaims, v.WriteClaims, v.PastClaims = nil, nil, nil
	require.False(t, v.GC("a1"), "GC of a volume without maps finds nothing")
	require.NoError(t, v.Claim(writeClaim("a1", "n1")))
	require.NoError(t, v.Claim(moved(writeClaim("a1", "n1"), ClaimStateUnpublishing)))
	require.Len(t, v.WriteClaims, 1)
	require.Len(t, v.PastClaims, 1)
}

func TestCanReadOnlyAndCanWrite(t *testing.T) {
	exhausted := func(v *CSIVolume) { v.ResourceExhausted = v.ResourceExhausted.AddDate(2026, 0, 0) }
	unschedulable := func(v *CSIVolume) { v.Schedulable = false }
	oneWriter := func(v *CSIVolume) { v.WriteClaims["a1"] = writeClaim("a1", "n1") }
	cases := []struct {
		name      string
		mode      AccessMode
		change    func(v *CSIVolume)
		canRead   bool
		canWrite  bool
		writeFail error
	}{
		{"a healthy single-node reader volume can only be read", AccessModeSingleNodeReader, nil, true, false, ErrWriteClaimRefused},
		{"a healthy multi-node reader volume can only be read", AccessModeMultiNodeReader, nil, true, false, ErrWriteClaimRefused},
		{"a healthy single-node writer volume can be written", AccessModeSingleNodeWriter, nil, true, true, nil},
		{"a healthy multi-node single writer volume can be written", AccessModeMultiNodeSingleWriter, nil, true, true, nil},
		{"a healthy multi-node multi writer volume can be written", AccessModeMultiNodeMultiWriter, nil, true, true, nil},
		{"a single-node writer volume with a writer cannot take another", AccessModeSingleNodeWriter, oneWriter, true, false, ErrVolumeMaxClaims},
		{"a multi-node single writer volume with a writer cannot take another", AccessModeMultiNodeSingleWriter, oneWriter, true, false, ErrVolumeMaxClaims},
		{"a multi-node multi writer volume with a writer can take another", AccessModeMultiNodeMultiWriter, oneWriter, true, true, nil},
		{"an unschedulable volume can be neither read nor written", AccessModeMultiNodeMultiWriter, unschedulable, false, false, ErrVolumeUnschedulable},
		{"a volume with exhausted resources can be neither read nor written", AccessModeMultiNodeMultiWriter, exhausted, false, false, ErrVolumeUnschedulable},
		{"a volume with an unknown access mode cannot be written", "sometimes-writer", nil, true, false, ErrWriteClaimRefused},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := healthyVolume(tc.mode)
			if tc.change != nil {
				tc.change(v)
			}
			require.Equal(t, tc.canRead, v.CanReadOnly())
			require.Equal(t, tc.canWrite, v.CanWrite())
			if tc.writeFail != nil {
				require.ErrorIs(t, v.writeRefusal(v.AccessMode), tc.writeFail)
			}
		})
	}
}
