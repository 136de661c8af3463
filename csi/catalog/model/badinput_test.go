package model

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// allAccessModes is how errors list the valid access modes.
const allAccessModes = "single-node-reader-only, single-node-writer, multi-node-reader-only, " +
	"multi-node-single-writer, multi-node-multi-writer"

// claimedVolume returns a multi-node multi-writer volume where alloc a1
// reads on n1, a2 writes on n1, and a3's write claim on n2 is unpublishing.
func claimedVolume() *CSIVolume {
	v := healthyVolume(AccessModeMultiNodeMultiWriter)
	v.ReadClaims["a1"] = readClaim("a1", "n1")
	v.WriteClaims["a2"] = writeClaim("a2", "n1")
	v.WriteClaims["a3"] = writeClaim("a3", "n2")
	v.PastClaims["a3"] = moved(writeClaim("a3", "n2"), ClaimStateUnpublishing)
	return v
}

// requireRefused fails unless do(x) returns an error with message msg that
// matches every sentinel of want, and leaves x as it was.
func requireRefused[T any](t *testing.T, x *T, copyOf func(*T) *T, do func(*T) error, msg string, want []error) {
	t.Helper()
	before := copyOf(x)
	err := do(x)
	require.EqualError(t, err, msg)
	for _, w := range want {
		require.ErrorIs(t, err, w)
	}
	require.Equal(t, before, x, "a refused input must change nothing")
}

func TestBadVolumeInputIsRefusedAndChangesNothing(t *testing.T) {
	plugin := NewCSIPlugin("nfs", 1)
	cases := []struct {
		name   string
		change func(v *CSIVolume)
		do     func(v *CSIVolume) error
		want   []error
		msg    string
	}{
		{
			name:   "a claim on a volume with an empty ID",
			change: func(v *CSIVolume) { v.ID = "" },
			do:     func(v *CSIVolume) error { return v.Claim(readClaim("a9", "n1")) },
			want:   []error{ErrInvalidVolume},
			msg:    `volume with an empty ID cannot be claimed`,
		},
		{
			name:   "a claim on a volume with an unknown access mode",
			change: func(v *CSIVolume) { v.AccessMode = "single-node-whatever" },
			do:     func(v *CSIVolume) error { return v.Claim(readClaim("a9", "n1")) },
			want:   []error{ErrInvalidVolume, ErrUnknownAccessMode},
			msg:    `volume "db" cannot be claimed: unknown access mode "single-node-whatever" (want one of ` + allAccessModes + `)`,
		},
		{
			name:   "a claim on a volume without an access mode",
			change: func(v *CSIVolume) { v.AccessMode = "" },
			do:     func(v *CSIVolume) error { return v.ClaimWrite(writeClaim("a9", "n1")) },
			want:   []error{ErrInvalidVolume, ErrUnknownAccessMode},
			msg:    `volume "db" cannot be claimed: unknown access mode "" (want one of ` + allAccessModes + `)`,
		},
		{
			name:   "a claim on a volume with an unknown attachment mode",
			change: func(v *CSIVolume) { v.AttachmentMode = "floppy" },
			do:     func(v *CSIVolume) error { return v.ClaimRead(readClaim("a9", "n1")) },
			want:   []error{ErrInvalidVolume, ErrUnknownAttachmentMode},
			msg:    `volume "db" cannot be claimed: unknown attachment mode "floppy" (want one of block-device, file-system)`,
		},
		{
			name: "a nil claim",
			do:   func(v *CSIVolume) error { return v.Claim(nil) },
			want: []error{ErrInvalidClaim},
			msg:  `claim is nil`,
		},
		{
			name: "a claim without an alloc ID",
			do:   func(v *CSIVolume) error { return v.Claim(readClaim("", "n1")) },
			want: []error{ErrInvalidClaim},
			msg:  `claim on node "n1" has an empty alloc ID`,
		},
		{
			name: "a claim without a node ID",
			do:   func(v *CSIVolume) error { return v.Claim(readClaim("a9", "")) },
			want: []error{ErrInvalidClaim},
			msg:  `claim by alloc a9 has an empty node ID`,
		},
		{
			name: "a claim with an unknown mode",
			do:   func(v *CSIVolume) error { return v.Claim(&Claim{AllocID: "a9", NodeID: "n1", Mode: "append"}) },
			want: []error{ErrInvalidClaim, ErrUnknownClaimMode},
			msg:  `claim by alloc a9: unknown claim mode "append" (want one of read, write)`,
		},
		{
			name: "a claim with an unknown state",
			do:   func(v *CSIVolume) error { return v.Claim(&Claim{AllocID: "a9", NodeID: "n1", Mode: ClaimModeRead}) },
			want: []error{ErrInvalidClaim, ErrUnknownClaimState},
			msg: `claim by alloc a9: unknown claim state "" ` +
				`(want one of taken, unpublishing, node-detached, controller-detached, ready-to-free)`,
		},
		{
			name: "ClaimRead given a write claim",
			do:   func(v *CSIVolume) error { return v.ClaimRead(writeClaim("a9", "n1")) },
			want: []error{ErrInvalidClaim},
			msg:  `claim by alloc a9 is a write claim in state taken, not a read claim in state taken`,
		},
		{
			name: "ClaimWrite given a claim being released",
			do:   func(v *CSIVolume) error { return v.ClaimWrite(moved(writeClaim("a2", "n1"), ClaimStateUnpublishing)) },
			want: []error{ErrInvalidClaim},
			msg:  `claim by alloc a2 is a write claim in state unpublishing, not a write claim in state taken`,
		},
		{
			name: "ClaimRelease given a taken claim",
			do:   func(v *CSIVolume) error { return v.ClaimRelease(readClaim("a1", "n1")) },
			want: []error{ErrInvalidClaim},
			msg:  `claim by alloc a1 is in state taken; releasing needs another state`,
		},
		{
			name: "a write claim by an alloc that holds a read claim",
			do:   func(v *CSIVolume) error { return v.Claim(writeClaim("a1", "n1")) },
			want: []error{ErrClaimModeConflict},
			msg:  `volume "db" (multi-node-multi-writer) has a read claim by alloc a1, not a write claim; release it first`,
		},
		{
			name: "a read claim by an alloc that holds a write claim",
			do:   func(v *CSIVolume) error { return v.Claim(readClaim("a2", "n1")) },
			want: []error{ErrClaimModeConflict},
			msg:  `volume "db" (multi-node-multi-writer) has a write claim by alloc a2, not a read claim; release it first`,
		},
		{
			name: "a claim by an alloc from another node than its held claim",
			do:   func(v *CSIVolume) error { return v.Claim(readClaim("a1", "n2")) },
			want: []error{ErrInvalidClaim},
			msg:  `volume "db" (multi-node-multi-writer) has the claim of alloc a1 on node n1, not on node n2`,
		},
		{
			name: "a claim by an alloc whose claim is being released",
			do:   func(v *CSIVolume) error { return v.Claim(writeClaim("a3", "n2")) },
			want: []error{ErrClaimReleasing},
			msg: `volume "db" (multi-node-multi-writer) is releasing the write claim of alloc a3 (unpublishing): ` +
				`no new claim until it is freed`,
		},
		{
			name: "releasing a claim that is not held",
			do:   func(v *CSIVolume) error { return v.Claim(moved(readClaim("a9", "n1"), ClaimStateNodeDetached)) },
			want: []error{ErrClaimNotFound},
			msg:  `volume "db" (multi-node-multi-writer) has no claim by alloc a9 to move to node-detached`,
		},
		{
			name: "releasing a read claim as a write claim",
			do:   func(v *CSIVolume) error { return v.Claim(moved(writeClaim("a1", "n1"), ClaimStateReadyToFree)) },
			want: []error{ErrClaimModeConflict},
			msg:  `volume "db" (multi-node-multi-writer) has a read claim by alloc a1, not a write claim; release it first`,
		},
		{
			name: "releasing a claim from another node",
			do:   func(v *CSIVolume) error { return v.Claim(moved(writeClaim("a2", "n2"), ClaimStateUnpublishing)) },
			want: []error{ErrInvalidClaim},
			msg:  `volume "db" (multi-node-multi-writer) has the claim of alloc a2 on node n1, not on node n2`,
		},
		{
			name:   "a new claim on an unschedulable volume",
			change: func(v *CSIVolume) { v.Health = Health{ControllerRequired: true, NodesHealthy: 2} },
			do:     func(v *CSIVolume) error { return v.Claim(writeClaim("a9", "n1")) },
			want:   []error{ErrVolumeUnschedulable},
			msg: `volume "db" (multi-node-multi-writer) is not schedulable: plugin "ebs" has 2 healthy node plugins ` +
				`and 0 healthy controllers (controller required: true)`,
		},
		{
			name:   "a new claim on a volume whose resources are exhausted",
			change: func(v *CSIVolume) { v.ResourceExhausted = time.Date(2026, 5, 4, 3, 2, 1, 0, time.UTC) },
			do:     func(v *CSIVolume) error { return v.Claim(readClaim("a9", "n1")) },
			want:   []error{ErrVolumeUnschedulable},
			msg:    `volume "db" (multi-node-multi-writer) is not schedulable: its resources are exhausted since 2026-05-04T03:02:01Z`,
		},
		{
			name: "a second writer on a single writer volume",
			change: func(v *CSIVolume) {
				v.AccessMode = AccessModeSingleNodeWriter
				delete(v.WriteClaims, "a3")
				delete(v.PastClaims, "a3")
			},
			do:   func(v *CSIVolume) error { return v.Claim(writeClaim("a9", "n1")) },
			want: []error{ErrVolumeMaxClaims},
			msg:  `volume "db" (single-node-writer) already has a writer (alloc a2)`,
		},
		{
			name:   "a writer on a read-only volume",
			change: func(v *CSIVolume) { v.AccessMode = AccessModeMultiNodeReader },
			do:     func(v *CSIVolume) error { return v.Claim(writeClaim("a9", "n1")) },
			want:   []error{ErrWriteClaimRefused},
			msg:    `volume "db" (multi-node-reader-only) is read-only`,
		},
		{
			name:   "a reader on another node of a single-node volume",
			change: func(v *CSIVolume) { v.AccessMode = AccessModeSingleNodeReader; v.WriteClaims = nil; v.PastClaims = nil },
			do:     func(v *CSIVolume) error { return v.Claim(readClaim("a9", "n2")) },
			want:   []error{ErrNodeConflict},
			msg:    `volume "db" (single-node-reader-only) is claimed on node n1: claim by alloc a9 on node n2 refused`,
		},
		{
			name: "health from another plugin",
			do:   func(v *CSIVolume) error { return v.UpdateHealth(plugin) },
			want: []error{ErrPluginMismatch},
			msg:  `volume "db" (multi-node-multi-writer) is served by plugin "ebs", not "nfs"`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := claimedVolume()
			if tc.change != nil {
				tc.change(v)
			}
			requireRefused(t, v, (*CSIVolume).Copy, tc.do, tc.msg, tc.want)
		})
	}
}

func TestBadPluginInputIsRefusedAndChangesNothing(t *testing.T) {
	cases := []struct {
		name   string
		plugin func() *CSIPlugin
		do     func(p *CSIPlugin) error
		want   []error
		msg    string
	}{
		{
			name:   "a fingerprint for a plugin without an ID",
			plugin: func() *CSIPlugin { return NewCSIPlugin("", 1) },
			do:     func(p *CSIPlugin) error { return p.AddPlugin("n1", fingerprint("a1", true, true, true)) },
			want:   []error{ErrInvalidPlugin},
			msg:    `plugin with an empty ID cannot take fingerprints`,
		},
		{
			name: "a fingerprint without a node ID",
			do:   func(p *CSIPlugin) error { return p.AddPlugin("", fingerprint("a1", true, true, true)) },
			want: []error{ErrInvalidPlugin},
			msg:  `plugin "ebs": fingerprint has an empty node ID`,
		},
		{
			name: "a nil fingerprint",
			do:   func(p *CSIPlugin) error { return p.AddPlugin("n1", nil) },
			want: []error{ErrInvalidPlugin},
			msg:  `plugin "ebs": fingerprint from node n1 is nil`,
		},
		{
			name: "a fingerprint of another plugin",
			do: func(p *CSIPlugin) error {
				info := fingerprint("a1", true, false, true)
				info.PluginID = "nfs"
				return p.AddPlugin("n1", info)
			},
			want: []error{ErrInvalidPlugin},
			msg:  `plugin "ebs": fingerprint from node n1 is for plugin "nfs"`,
		},
		{
			name: "a fingerprint without an alloc",
			do:   func(p *CSIPlugin) error { return p.AddPlugin("n1", fingerprint("", true, false, true)) },
			want: []error{ErrInvalidPlugin},
			msg:  `plugin "ebs": fingerprint from node n1 has an empty alloc ID`,
		},
		{
			name: "a fingerprint with neither controller nor node info",
			do:   func(p *CSIPlugin) error { return p.AddPlugin("n1", fingerprint("a1", true, false, false)) },
			want: []error{ErrInvalidPlugin},
			msg:  `plugin "ebs": fingerprint from node n1 (alloc a1) has neither controller nor node info`,
		},
		{
			name: "a job without an ID",
			do:   func(p *CSIPlugin) error { return p.SetJob(PluginJob{Type: PluginTypeNode, Expected: 1}) },
			want: []error{ErrInvalidPlugin},
			msg:  `plugin "ebs": job has an empty ID`,
		},
		{
			name: "a job expecting a negative count",
			do:   func(p *CSIPlugin) error { return p.SetJob(PluginJob{ID: "j", Type: PluginTypeNode, Expected: -1}) },
			want: []error{ErrInvalidPlugin},
			msg:  `plugin "ebs": job j expects -1 instances`,
		},
		{
			name: "a job of an unknown type",
			do:   func(p *CSIPlugin) error { return p.SetJob(PluginJob{ID: "j", Type: "sidecar", Expected: 1}) },
			want: []error{ErrInvalidPlugin, ErrUnknownPluginType},
			msg:  `plugin "ebs": job j: unknown plugin type "sidecar" (want one of controller, node, monolith)`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := NewCSIPlugin("ebs", 1)
			require.NoError(t, p.AddPlugin("n0", fingerprint("a0", true, true, true)))
			require.NoError(t, p.SetJob(PluginJob{ID: "j0", Type: PluginTypeMonolith, Expected: 1}))
			if tc.plugin != nil {
				p = tc.plugin()
			}
			requireRefused(t, p, (*CSIPlugin).Copy, tc.do, tc.msg, tc.want)
		})
	}
}
