package catalog_test

import (
	"cmp"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
)

func TestCatalogRefusesBadInputAndChangesNothing(t *testing.T) {
	f := startCatFixture(t, catMemoryBucket(t))
	ctx := context.Background()
	f.feed(catNodeFingerprint("hostpath", "p1", true))
	f.register(catVolume("db", "hostpath", model.AccessModeSingleNodeWriter))
	require.NoError(t, f.cat.Claim(ctx, catClaim("db", "a1", false)))
	require.NoError(t, f.cat.Claim(ctx, catClaim("db", "a2", true)))

	register := func(change func(v *model.CSIVolume)) func() error {
		return func() error {
			v := catVolume("vol", "hostpath", model.AccessModeSingleNodeWriter)
			change(v)
			_, err := f.cat.RegisterVolume(ctx, v)
			return err
		}
	}
	send := func(msg proto.Message) func() error {
		return func() error {
			f.manager.Send(f.cat.PID(), msg)
			resp, ok := probe.Expect[proto.Message](t, f.manager, catWait).(interface{ GetError() *messages.Error })
			require.True(t, ok, "the answer carries an error")
			return messages.ErrorFromProto(resp.GetError())
		}
	}
	fingerprint := func(change func(fp *messages.CSIFingerprint)) func() error {
		return func() error {
			fp := catNodeFingerprint("hostpath", "p2", true)
			change(fp)
			f.feed(fp)
			return nil
		}
	}
	claim := func(msg *messages.ClaimVolume) func() error {
		msg.VolumeId = cmp.Or(msg.VolumeId, "db")
		msg.AllocId = cmp.Or(msg.AllocId, "a3")
		msg.Mode = cmp.Or(msg.Mode, "read")
		return send(msg)
	}
	release := func(msg *messages.ReleaseVolume) func() error {
		msg.VolumeId = cmp.Or(msg.VolumeId, "db")
		msg.AllocId = cmp.Or(msg.AllocId, "a2")
		return send(msg)
	}
	tests := []struct {
		name    string
		do      func() error
		wantErr []error // none for fingerprints: nobody is answered
	}{
		{"a volume with an empty ID", register(func(v *model.CSIVolume) { v.ID = "" }), []error{model.ErrInvalid}},
		{"a volume ID with a path separator", register(func(v *model.CSIVolume) { v.ID = "a/b" }), []error{model.ErrInvalid}},
		{"a volume ID that climbs out", register(func(v *model.CSIVolume) { v.ID = ".." }), []error{model.ErrInvalid}},
		{"a namespace that climbs out", register(func(v *model.CSIVolume) { v.Namespace = "../etc" }), []error{model.ErrInvalid}},
		{"a volume ID that is not UTF-8", register(func(v *model.CSIVolume) { v.ID = "vol\xff" }), []error{model.ErrInvalid}},
		{"a volume without a plugin", register(func(v *model.CSIVolume) { v.PluginID = "" }), []error{model.ErrInvalid}},
		{"a plugin ID with a path separator", register(func(v *model.CSIVolume) { v.PluginID = "host/path" }), []error{model.ErrInvalid}},
		{"an unknown access mode", register(func(v *model.CSIVolume) { v.AccessMode = "single-node-admin" }),
			[]error{model.ErrInvalid, model.ErrUnknownAccessMode}},
		{"an unknown attachment mode", register(func(v *model.CSIVolume) { v.AttachmentMode = "floppy" }),
			[]error{model.ErrInvalid, model.ErrUnknownAttachmentMode}},
		{"a registration that carries claims", register(func(v *model.CSIVolume) {
			v.WriteClaims["a9"] = &model.Claim{AllocID: "a9", NodeID: catNode, Mode: model.ClaimModeWrite, State: model.ClaimStateTaken}
		}), []error{model.ErrInvalid}},
		{"a registration message without a volume", send(&messages.RegisterVolume{}), []error{model.ErrInvalid}},
		{"a new description for a claimed volume", register(func(v *model.CSIVolume) {
			v.ID, v.AccessMode = "db", model.AccessModeMultiNodeMultiWriter
		}), []error{model.ErrVolumeInUse}},

		{"deregistering an empty ID", send(&messages.DeregisterVolume{}), []error{model.ErrInvalid}},
		{"deregistering in a namespace that climbs out", send(&messages.DeregisterVolume{Namespace: "..", VolumeId: "db"}), []error{model.ErrInvalid}},
		{"deregistering an unknown volume", send(&messages.DeregisterVolume{VolumeId: "nope"}), []error{model.ErrVolumeNotFound}},
		{"deregistering a claimed volume", send(&messages.DeregisterVolume{VolumeId: "db"}), []error{model.ErrVolumeInUse}},

		{"a claim with an empty alloc ID", send(&messages.ClaimVolume{VolumeId: "db", Mode: "read"}), []error{model.ErrInvalid}},
		{"a claim by an alloc ID that climbs out", claim(&messages.ClaimVolume{AllocId: "../a1"}), []error{model.ErrInvalid}},
		{"a claim on a node ID with a separator", claim(&messages.ClaimVolume{NodeId: "n/1"}), []error{model.ErrInvalid}},
		{"a claim in an unknown mode", claim(&messages.ClaimVolume{Mode: "admin"}), []error{model.ErrInvalid, model.ErrUnknownClaimMode}},
		{"a claim with an unknown access mode", claim(&messages.ClaimVolume{AccessMode: "bogus"}), []error{model.ErrInvalid, model.ErrUnknownAccessMode}},
		{"a claim on an unknown volume", claim(&messages.ClaimVolume{VolumeId: "nope"}), []error{model.ErrVolumeNotFound}},
		{"a write claim by an alloc that holds a read claim", claim(&messages.ClaimVolume{AllocId: "a2", Mode: "write"}),
			[]error{model.ErrClaimRefused, model.ErrClaimModeConflict}},
		{"a read claim by an alloc that holds a write claim", claim(&messages.ClaimVolume{AllocId: "a1", Mode: "read"}),
			[]error{model.ErrClaimRefused, model.ErrClaimModeConflict}},
		{"a second writer", claim(&messages.ClaimVolume{AllocId: "a3", Mode: "write"}), []error{model.ErrClaimRefused, model.ErrVolumeMaxClaims}},

		{"a release to state taken", release(&messages.ReleaseVolume{State: "taken"}), []error{model.ErrInvalid}},
		{"a release to an unknown state", release(&messages.ReleaseVolume{State: "gone-fishing"}), []error{model.ErrInvalid, model.ErrUnknownClaimState}},
		{"a release by an alloc ID with a separator", release(&messages.ReleaseVolume{AllocId: "a/2"}), []error{model.ErrInvalid}},
		{"a release on an unknown volume", release(&messages.ReleaseVolume{VolumeId: "nope"}), []error{model.ErrVolumeNotFound}},
		{"moving a claim that is not held to unpublishing", release(&messages.ReleaseVolume{AllocId: "a7", State: "unpublishing"}),
			[]error{model.ErrClaimRefused, model.ErrClaimNotFound}},

		{"getting a volume ID that climbs out", send(&messages.GetVolumeRequest{VolumeId: "../db"}), []error{model.ErrInvalid}},
		{"listing a namespace with a separator", send(&messages.ListVolumesRequest{Namespace: "a/b"}), []error{model.ErrInvalid}},

		{"a fingerprint of another plugin type", fingerprint(func(fp *messages.CSIFingerprint) { fp.Type = "docker-volume" }), nil},
		{"a fingerprint without a plugin name", fingerprint(func(fp *messages.CSIFingerprint) { fp.Name = "" }), nil},
		{"a fingerprint whose plugin name climbs out", fingerprint(func(fp *messages.CSIFingerprint) { fp.Name = "../hostpath" }), nil},
		{"a fingerprint without an alloc", fingerprint(func(fp *messages.CSIFingerprint) { fp.AllocId = "" }), nil},
	}
	before := f.dump()
	for _, tt := range tests {
		t.Run(tt.name+" is refused and changes nothing", func(t *testing.T) {
			err := tt.do()
			for _, want := range tt.wantErr {
				require.ErrorIs(t, err, want)
			}
			if err != nil {
				require.True(t, strings.HasPrefix(err.Error(), tt.wantErr[0].Error()+": "), "prefixed by its sentinel, once: %q", err)
			}
			f.settle()
			require.Equal(t, before, f.dump())
		})
	}

	t.Run("no refusal took an index", func(t *testing.T) {
		v := f.register(catVolume("vol", "hostpath", model.AccessModeSingleNodeWriter))
		require.Equal(t, before.lastIndex()+1, v.CreateIndex)
	})
}
