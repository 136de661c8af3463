package model

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func zone(z string) *Topology { return &Topology{Segments: map[string]string{"zone": z}} }

func fullVolume() *CSIVolume {
	v := claimedVolume()
	v.Topologies = []*Topology{zone("a"), zone("b"), {}}
	v.Health = Health{Schedulable: true, ControllerRequired: true, ControllersHealthy: 1, ControllersExpected: 2, NodesHealthy: 3, NodesExpected: 4}
	v.ResourceExhausted = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	v.CreateIndex, v.ModifyIndex = 7, 9
	return v
}

func TestVolumeCopySharesNothing(t *testing.T) {
	v := fullVolume()
	requireDeepCopy(t, v, v.Copy(), scribbleVolume)
}

func TestVolumeCopyKeepsNilAsNil(t *testing.T) {
	require.Nil(t, (*CSIVolume)(nil).Copy())
	v := &CSIVolume{ID: "db"}
	require.Equal(t, v, v.Copy())
}

func TestVolumeEqualComparesTopologiesAsSets(t *testing.T) {
	base := func(ts ...*Topology) *CSIVolume {
		v := healthyVolume(AccessModeSingleNodeWriter)
		v.Topologies = ts
		return v
	}
	cases := []struct {
		name  string
		a, b  *CSIVolume
		equal bool
	}{
		{"the same topologies in the same order", base(zone("a"), zone("b")), base(zone("a"), zone("b")), true},
		{"the same topologies in another order", base(zone("a"), zone("b")), base(zone("b"), zone("a")), true},
		{"a repeated topology counts once", base(zone("a"), zone("a"), zone("b")), base(zone("b"), zone("a")), true},
		{"no topologies and an empty list", base(), &CSIVolume{ID: "db", Namespace: DefaultNamespace, PluginID: "ebs",
			AccessMode: AccessModeSingleNodeWriter, AttachmentMode: AttachmentModeFileSystem}, true},
		{"one list a strict subset of the other", base(zone("a")), base(zone("a"), zone("b")), false},
		{"one list a strict superset of the other", base(zone("a"), zone("b")), base(zone("a")), false},
		{"different topologies", base(zone("a")), base(zone("b")), false},
		{"a nil topology and an empty one", base(nil), base(&Topology{}), false},
		{"two nil topologies", base(nil), base(nil), true},
		{"claims, health and indexes are not compared", base(), func() *CSIVolume {
			v := claimedVolume()
			v.AccessMode, v.Health, v.ModifyIndex = AccessModeSingleNodeWriter, Health{}, 99
			return v
		}(), true},
		{"a different plugin", base(), func() *CSIVolume { v := base(); v.PluginID = "nfs"; return v }(), false},
		{"a different access mode", base(), healthyVolume(AccessModeSingleNodeReader), false},
		{"a nil volume and a volume", nil, base(), false},
		{"two nil volumes", nil, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.equal, tc.a.Equal(tc.b))
			require.Equal(t, tc.equal, tc.b.Equal(tc.a), "Equal must be symmetric")
		})
	}
}

func TestValidateAcceptsAGoodVolume(t *testing.T) {
	require.NoError(t, fullVolume().Validate())
	require.NoError(t, healthyVolume(AccessModeSingleNodeReader).Validate())
}

func TestValidateReportsEveryProblemAtOnce(t *testing.T) {
	v := &CSIVolume{
		AccessMode:     "rw",
		AttachmentMode: "",
		Topologies:     []*Topology{nil, {Segments: map[string]string{"": "x"}}},
		ReadClaims: map[string]*Claim{
			"a1": readClaim("a1", "n1"),
			"a2": readClaim("other", "n1"),
			"a3": writeClaim("a3", "n1"),
			"a4": nil,
		},
		WriteClaims: map[string]*Claim{"a1": writeClaim("a1", "n2")},
		PastClaims: map[string]*Claim{
			"a5": moved(readClaim("a5", "n1"), ClaimStateUnpublishing),
			"a1": moved(readClaim("a1", "n1"), ClaimStateReadyToFree),
		},
	}
	err := v.Validate()
	require.ErrorIs(t, err, ErrInvalidVolume)
	want := []string{
		`volume "": ID must not be empty`,
		`volume "": namespace must not be empty`,
		`volume "": plugin ID must not be empty`,
		`volume "": unknown access mode "rw" (want one of ` + allAccessModes + `)`,
		`volume "": unknown attachment mode "" (want one of block-device, file-system)`,
		`volume "": topology 0 is nil`,
		`volume "": topologies[1] segment key must not be empty`,
		`volume "": alloc a1 holds both a read and a write claim`,
		`volume "": read claim filed under alloc a2 belongs to alloc other`,
		`volume "": read claim of alloc a3 is a write claim in state taken`,
		`volume "": read claim filed under alloc a4: claim is nil`,
		`volume "": past claim of alloc a1 is in state ready-to-free`,
		`volume "": past claim of alloc a5 has no read or write claim`,
		`volume "": has 1 write claim(s) (allocs a1); rw allows 0`,
	}
	require.Equal(t, want, strings.Split(err.Error(), "\n"))
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		require.ErrorIs(t, e, ErrInvalidVolume, e.Error())
	}
}

func TestValidateChecksClaimsAgainstTheAccessMode(t *testing.T) {
	cases := []struct {
		name  string
		setup func(v *CSIVolume)
		msg   string
	}{
		{"two writers on a single writer volume", func(v *CSIVolume) {
			v.AccessMode = AccessModeMultiNodeSingleWriter
			v.WriteClaims["a1"], v.WriteClaims["a2"] = writeClaim("a1", "n1"), writeClaim("a2", "n2")
		}, `volume "db": has 2 write claim(s) (allocs a1, a2); multi-node-single-writer allows 1`},
		{"claims on two nodes of a single-node volume", func(v *CSIVolume) {
			v.AccessMode = AccessModeSingleNodeReader
			v.ReadClaims["a1"], v.ReadClaims["a2"] = readClaim("a1", "n1"), readClaim("a2", "n2")
		}, `volume "db": is claimed on nodes [n1 n2]; single-node-reader-only allows one node`},
		{"a past claim that differs from the held claim", func(v *CSIVolume) {
			v.ReadClaims["a1"] = readClaim("a1", "n1")
			v.PastClaims["a1"] = moved(readClaim("a1", "n2"), ClaimStateUnpublishing)
		}, `volume "db": past claim of alloc a1 (read on n2) differs from its held claim (read on n1)`},
		{"a held claim not in state taken", func(v *CSIVolume) {
			v.WriteClaims["a1"] = moved(writeClaim("a1", "n1"), ClaimStateNodeDetached)
		}, `volume "db": write claim of alloc a1 is a write claim in state node-detached`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := healthyVolume(AccessModeMultiNodeMultiWriter)
			tc.setup(v)
			require.EqualError(t, v.Validate(), tc.msg)
		})
	}
	require.ErrorIs(t, (*CSIVolume)(nil).Validate(), ErrInvalidVolume)
}

func TestVolumeStubSummarizesAndSharesNothing(t *testing.T) {
	v := fullVolume()
	s := v.Stub()
	require.Equal(t, &CSIVolumeStub{
		ID: "db", Namespace: DefaultNamespace, PluginID: "ebs",
		AccessMode: AccessModeMultiNodeMultiWriter, AttachmentMode: AttachmentModeFileSystem,
		Topologies:     []*Topology{zone("a"), zone("b"), {}},
		CurrentReaders: 1, CurrentWriters: 2,
		Health:            v.Health,
		ResourceExhausted: v.ResourceExhausted,
		CreateIndex:       7, ModifyIndex: 9,
	}, s)
	s.Topologies[0].Segments["zone"] = "z"
	require.Equal(t, "a", v.Topologies[0].Segments["zone"])
}

func TestPluginHealthMakesAVolumeSchedulable(t *testing.T) {
	cases := []struct {
		name        string
		fingerprint []*CSIInfo // added on nodes n0, n1, ...
		schedulable bool
	}{
		{"a plugin without fingerprints", nil, false},
		{"a healthy node plugin, no controller required", []*CSIInfo{fingerprint("a1", true, false, true)}, true},
		{"an unhealthy node plugin only", []*CSIInfo{fingerprint("a1", false, false, true)}, false},
		{"a healthy controller only", []*CSIInfo{fingerprint("a1", true, true, false)}, false},
		{"a healthy node plugin whose controller is required and missing", []*CSIInfo{
			requireController(fingerprint("a1", true, false, true))}, false},
		{"a healthy node plugin whose required controller is unhealthy", []*CSIInfo{
			requireController(fingerprint("a1", false, true, false)), requireController(fingerprint("a2", true, false, true))}, false},
		{"a healthy node plugin and a healthy required controller", []*CSIInfo{
			requireController(fingerprint("a1", true, true, false)), requireController(fingerprint("a2", true, false, true))}, true},
		{"a healthy monolith that requires a controller", []*CSIInfo{requireController(fingerprint("a1", true, true, true))}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := NewCSIPlugin("ebs", 1)
			for i, info := range tc.fingerprint {
				require.NoError(t, p.AddPlugin("n"+string(rune('0'+i)), info))
			}
			v := healthyVolume(AccessModeSingleNodeWriter)
			require.NoError(t, v.UpdateHealth(p))
			require.Equal(t, tc.schedulable, v.Schedulable)
			require.Equal(t, PluginHealth(p), v.Health)
			require.Equal(t, tc.schedulable, v.CanReadOnly())
		})
	}
}

func requireController(info *CSIInfo) *CSIInfo {
	info.RequiresControllerPlugin = true
	return info
}

func TestUpdateHealthWithAGonePluginMakesTheVolumeUnschedulable(t *testing.T) {
	v := healthyVolume(AccessModeSingleNodeWriter)
	require.NoError(t, v.UpdateHealth(nil))
	require.Equal(t, Health{}, v.Health)
	err := v.Claim(readClaim("a1", "n1"))
	require.ErrorIs(t, err, ErrVolumeUnschedulable)
	require.False(t, errors.Is(err, ErrInvalidClaim))
}
