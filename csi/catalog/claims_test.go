package catalog_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
)

func TestCatalogGrantsAndRefusesClaimsByTheRules(t *testing.T) {
	f := startCatFixture(t, catMemoryBucket(t))
	ctx := context.Background()
	f.feed(catNodeFingerprint("hostpath", "p1", true))
	f.register(catVolume("db", "hostpath", model.AccessModeSingleNodeWriter))

	claimMsg := func(alloc string, mode model.ClaimMode, node string) func() error {
		return func() error {
			_, err := catAsk[*messages.ClaimVolumeResponse](f, &messages.ClaimVolume{VolumeId: "db", AllocId: alloc, Mode: string(mode), NodeId: node})
			return err
		}
	}
	steps := []struct {
		name    string
		do      func() error
		wantErr []error
		check   func(t *testing.T, v *model.CSIVolume)
		changed bool
	}{
		{name: "alloc a1 claims to write by message", do: claimMsg("a1", model.ClaimModeWrite, ""), changed: true,
			check: func(t *testing.T, v *model.CSIVolume) {
				require.Equal(t, &model.Claim{AllocID: "a1", NodeID: catNode, Mode: model.ClaimModeWrite, State: model.ClaimStateTaken}, v.WriteClaims["a1"])
			}},
		{name: "alloc a1 claiming the same again changes nothing", do: claimMsg("a1", model.ClaimModeWrite, catNode)},
		{name: "a second writer is refused",
			do:      func() error { return f.cat.Claim(ctx, catClaim("db", "a2", false)) },
			wantErr: []error{model.ErrClaimRefused, model.ErrVolumeMaxClaims}},
		{name: "a reader on the same node is granted", changed: true,
			do:    func() error { return f.cat.Claim(ctx, catClaim("db", "a2", true)) },
			check: func(t *testing.T, v *model.CSIVolume) { require.Contains(t, v.ReadClaims, "a2") }},
		{name: "a reader on another node is refused", do: claimMsg("a3", model.ClaimModeRead, "node-2"),
			wantErr: []error{model.ErrClaimRefused, model.ErrNodeConflict}},
		{name: "the writer asking to read as well is refused", do: claimMsg("a1", model.ClaimModeRead, ""),
			wantErr: []error{model.ErrClaimRefused, model.ErrClaimModeConflict}},
		{name: "a claim through another plugin is refused",
			do: func() error {
				req := catClaim("db", "a4", true)
				req.Plugin = "nfs"
				return f.cat.Claim(ctx, req)
			},
			wantErr: []error{model.ErrClaimRefused}},
		{name: "a claim with another access mode is refused",
			do: func() error {
				req := catClaim("db", "a4", true)
				req.Plugin, req.Usage.AccessMode = "hostpath", model.AccessModeMultiNodeReader
				return f.cat.Claim(ctx, req)
			},
			wantErr: []error{model.ErrClaimRefused}},
		{name: "deregistering the claimed volume is refused",
			do:      func() error { return f.cat.DeregisterVolume(ctx, "", "db") },
			wantErr: []error{model.ErrVolumeInUse}},
		{name: "moving the writer's claim to unpublishing keeps it as a past claim", changed: true,
			do: func() error {
				_, err := catAsk[*messages.ReleaseVolumeResponse](f, &messages.ReleaseVolume{VolumeId: "db", AllocId: "a1", State: string(model.ClaimStateUnpublishing)})
				return err
			},
			check: func(t *testing.T, v *model.CSIVolume) {
				require.Contains(t, v.WriteClaims, "a1")
				require.Equal(t, model.ClaimStateUnpublishing, v.PastClaims["a1"].State)
				require.Empty(t, v.PastClaims["a1"].LastError)
			}},
		{name: "a release stuck at node-detached keeps its last error, cut to a bounded length", changed: true,
			do: func() error {
				_, err := catAsk[*messages.ReleaseVolumeResponse](f, &messages.ReleaseVolume{VolumeId: "db", AllocId: "a1",
					State: string(model.ClaimStateNodeDetached), LastError: "ControllerUnpublishVolume: unavailable: " + strings.Repeat("é", 2000)})
				return err
			},
			check: func(t *testing.T, v *model.CSIVolume) {
				past := v.PastClaims["a1"]
				require.Equal(t, model.ClaimStateNodeDetached, past.State)
				require.True(t, strings.HasPrefix(past.LastError, "ControllerUnpublishVolume: unavailable: éé"))
				require.LessOrEqual(t, len(past.LastError), 1024+len("…"))
				require.True(t, utf8.ValidString(past.LastError), "the cut keeps whole characters")
			}},
		{name: "claiming while the claim is being released is refused",
			do:      func() error { return f.cat.Claim(ctx, catClaim("db", "a1", false)) },
			wantErr: []error{model.ErrClaimRefused, model.ErrClaimReleasing}},
		{name: "releasing frees the claim", changed: true,
			do: func() error { return f.cat.Release(ctx, catClaim("db", "a1", false)) },
			check: func(t *testing.T, v *model.CSIVolume) {
				require.Empty(t, v.WriteClaims)
				require.Empty(t, v.PastClaims)
			}},
		{name: "releasing again changes nothing", do: func() error { return f.cat.Release(ctx, catClaim("db", "a1", false)) }},
		{name: "releasing on a volume the catalog does not know changes nothing",
			do: func() error { return f.cat.Release(ctx, catClaim("gone", "a1", false)) }},
		{name: "another writer is granted now", changed: true,
			do:    func() error { return f.cat.Claim(ctx, catClaim("db", "a5", false)) },
			check: func(t *testing.T, v *model.CSIVolume) { require.Equal(t, []string{"a5"}, catKeys(v.WriteClaims)) }},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			before := f.volume("", "db")
			err := step.do()
			for _, want := range step.wantErr {
				require.ErrorIs(t, err, want)
			}
			if step.wantErr == nil {
				require.NoError(t, err)
			}
			after := f.volume("", "db")
			if !step.changed {
				require.Equal(t, before, after, "nothing changed")
				return
			}
			require.Equal(t, before.ModifyIndex+1, after.ModifyIndex)
			if step.check != nil {
				step.check(t, after)
			}
		})
	}
}

func catKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
