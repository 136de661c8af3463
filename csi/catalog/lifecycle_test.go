package catalog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi/catalog"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/storage"
)

// createdVolume is a volume as the controller operations register it, with
// every plugin-side field set.
func createdVolume(namespace, id, external string) *model.CSIVolume {
	v := catVolume(id, "hostpath", model.AccessModeSingleNodeWriter)
	v.Namespace, v.ExternalID, v.CapacityBytes, v.Created = namespace, external, 1<<20, true
	v.Parameters = map[string]string{"tier": "fast"}
	v.Secrets = model.Secrets{"password": "hunter2-secret-value"}
	v.Context = map[string]string{"path": "/srv/" + external}
	v.MountOptions = &model.MountOptions{FSType: "ext4", MountFlags: []string{"noatime"}}
	v.RequestedTopologies = []*model.Topology{{Segments: map[string]string{"zone": "a"}}}
	v.Topologies = []*model.Topology{{Segments: map[string]string{"zone": "a"}}}
	return v
}

func TestCatalogKeepsOnePluginVolumeInOneNamespace(t *testing.T) {
	ctx := context.Background()
	f := startCatFixture(t, catMemoryBucket(t))
	first := f.register(createdVolume("team-a", "db", "vol-1"))
	require.Equal(t, "vol-1", first.ExternalID)

	_, err := f.cat.RegisterVolume(ctx, createdVolume("team-b", "db", "vol-1"))
	require.ErrorIs(t, err, model.ErrVolumeConflict)
	require.Contains(t, err.Error(), `catalog volume "db" in namespace "team-a"`, "the error names the volume that holds it")
	_, err = f.cat.GetVolume(ctx, "team-b", "db")
	require.ErrorIs(t, err, model.ErrVolumeNotFound, "the refused registration left nothing")

	require.Equal(t, first.ModifyIndex, f.register(createdVolume("team-a", "db", "vol-1")).ModifyIndex,
		"registering the same volume again changes nothing")

	other := createdVolume("team-b", "db", "vol-1")
	other.PluginID = "other-plugin"
	f.register(other) // another plugin's vol-1 is another plugin volume

	plain := f.register(catVolume("cache", "hostpath", model.AccessModeSingleNodeWriter))
	require.Equal(t, "cache", plain.ExternalID, "a registered volume's external ID defaults to its ID")
	_, err = f.cat.RegisterVolume(ctx, createdVolume("team-b", "cache-alias", "cache"))
	require.ErrorIs(t, err, model.ErrVolumeConflict)
	require.Contains(t, err.Error(), `catalog volume "cache" in namespace "default"`)
}

func TestCatalogRefusesAPlainRegistrationOverACreatedVolume(t *testing.T) {
	ctx := context.Background()
	f := startCatFixture(t, catMemoryBucket(t))
	created := f.register(createdVolume("default", "db", "vol-1"))
	_, err := f.cat.RegisterVolume(ctx, catVolume("db", "hostpath", model.AccessModeSingleNodeWriter))
	require.ErrorIs(t, err, model.ErrVolumeConflict)
	require.Contains(t, err.Error(), `created through plugin "hostpath"'s controller (plugin volume "vol-1")`)
	require.Equal(t, created, f.volume("", "db"), "the created volume keeps its plugin side")
}

func TestCatalogMarksAVolumeDeletingOnlyWithoutClaims(t *testing.T) {
	ctx := context.Background()
	f := startCatFixture(t, catMemoryBucket(t))
	f.feed(catNodeFingerprint("hostpath", "p1", true))
	f.register(createdVolume("default", "db", "vol-1"))
	require.NoError(t, f.cat.Claim(ctx, catClaim("db", "a1", false)))

	_, err := f.cat.MarkVolumeDeleting(ctx, "", "db")
	require.ErrorIs(t, err, model.ErrVolumeInUse)
	require.Contains(t, err.Error(), "claimed by allocs a1")
	require.False(t, f.volume("", "db").Deleting)

	// A claim on its way out (a past claim) still holds the volume.
	_, err = catAsk[*messages.ReleaseVolumeResponse](f, &messages.ReleaseVolume{VolumeId: "db", AllocId: "a1", State: string(model.ClaimStateNodeDetached)})
	require.NoError(t, err)
	require.Contains(t, f.volume("", "db").PastClaims, "a1")
	_, err = f.cat.MarkVolumeDeleting(ctx, "", "db")
	require.ErrorIs(t, err, model.ErrVolumeInUse)
	require.Contains(t, err.Error(), "a1")
	require.ErrorIs(t, f.cat.DeregisterVolume(ctx, "", "db"), model.ErrVolumeInUse, "deregistering is refused as well")

	require.NoError(t, f.cat.Release(ctx, catClaim("db", "a1", false)))
	marked, err := f.cat.MarkVolumeDeleting(ctx, "", "db")
	require.NoError(t, err)
	require.True(t, marked.Deleting)
	require.Equal(t, "hunter2-secret-value", marked.Secrets["password"], "the Go caller gets the secrets for DeleteVolume")
	again, err := f.cat.MarkVolumeDeleting(ctx, "", "db")
	require.NoError(t, err)
	require.Equal(t, marked.ModifyIndex, again.ModifyIndex, "marking again changes nothing")

	require.ErrorIs(t, f.cat.Claim(ctx, catClaim("db", "a2", true)), model.ErrVolumeDeleting)
	_, err = f.cat.RegisterVolume(ctx, createdVolume("default", "db", "vol-1"))
	require.ErrorIs(t, err, model.ErrVolumeDeleting)
	_, err = f.cat.RecordVolumeCapacity(ctx, "", "db", 2<<20)
	require.ErrorIs(t, err, model.ErrVolumeDeleting)
	require.Equal(t, marked.ModifyIndex, f.volume("", "db").ModifyIndex, "refusals change nothing")

	require.NoError(t, f.cat.DeregisterVolume(ctx, "", "db"))
	_, err = f.cat.MarkVolumeDeleting(ctx, "", "db")
	require.ErrorIs(t, err, model.ErrVolumeNotFound)
}

func TestCatalogRecordsCapacityWhileClaimed(t *testing.T) {
	ctx := context.Background()
	f := startCatFixture(t, catMemoryBucket(t))
	f.feed(catNodeFingerprint("hostpath", "p1", true))
	f.register(createdVolume("default", "db", "vol-1"))
	require.NoError(t, f.cat.Claim(ctx, catClaim("db", "a1", false)))

	v, err := f.cat.RecordVolumeCapacity(ctx, "", "db", 3<<20)
	require.NoError(t, err)
	require.Equal(t, int64(3<<20), v.CapacityBytes)
	require.Contains(t, v.WriteClaims, "a1", "expansion keeps the claims")

	_, err = f.cat.RecordVolumeCapacity(ctx, "", "db", -1)
	require.ErrorIs(t, err, model.ErrInvalid)
	_, err = f.cat.RecordVolumeCapacity(ctx, "", "nope", 1)
	require.ErrorIs(t, err, model.ErrVolumeNotFound)
	require.Equal(t, int64(3<<20), f.volume("", "db").CapacityBytes)
}

func TestCatalogRefusesBadPluginSideFieldsAndChangesNothing(t *testing.T) {
	ctx := context.Background()
	f := startCatFixture(t, catMemoryBucket(t))
	before := f.dump()
	cases := map[string]func(v *model.CSIVolume){
		"a negative capacity":                func(v *model.CSIVolume) { v.CapacityBytes = -5 },
		"an external ID with a control char": func(v *model.CSIVolume) { v.ExternalID = "vol\n1" },
		"an external ID over the limit": func(v *model.CSIVolume) {
			v.ExternalID = string(bytes.Repeat([]byte("x"), model.MaxExternalIDBytes+1))
		},
		"a parameter with an empty key": func(v *model.CSIVolume) { v.Parameters = map[string]string{"": "x"} },
		"a secret with an empty key":    func(v *model.CSIVolume) { v.Secrets = model.Secrets{"": "x"} },
		"an fs type on a block device":  func(v *model.CSIVolume) { v.AttachmentMode = model.AttachmentModeBlockDevice },
		"an fs type with a space":       func(v *model.CSIVolume) { v.MountOptions.FSType = "ext 4" },
		"an empty mount flag":           func(v *model.CSIVolume) { v.MountOptions.MountFlags = []string{""} },
		"a requested topology with an empty key": func(v *model.CSIVolume) {
			v.RequestedTopologies = []*model.Topology{{Segments: map[string]string{"": "a"}}}
		},
	}
	for name, spoil := range cases {
		t.Run(name, func(t *testing.T) {
			v := createdVolume("default", "db", "vol-1")
			spoil(v)
			_, err := f.cat.RegisterVolume(ctx, v)
			require.ErrorIs(t, err, model.ErrInvalid)
			require.NotContains(t, err.Error(), "hunter2-secret-value")
			require.Equal(t, before, f.dump(), "nothing changed")
		})
	}
}

func TestCatalogKeepsSecretsDurablyAndNeverLogsOrPrintsThem(t *testing.T) {
	const secret = "hunter2-secret-value"
	path := filepath.Join(t.TempDir(), "state.db")
	logs := &probe.LogBuffer{}
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, Output: logs})
	run := func(t *testing.T, do func(cat *catalog.Catalog)) {
		store, err := storage.OpenBolt(path, storage.BoltOptions{})
		require.NoError(t, err)
		defer func() { require.NoError(t, store.Close()) }()
		bucket, err := store.Bucket(catalog.Bucket)
		require.NoError(t, err)
		cat, err := catalog.Start(probe.NewSystem(t), catalog.Config{Bucket: bucket, NodeID: catNode, Logger: logger})
		require.NoError(t, err)
		do(cat)
		require.NoError(t, cat.Shutdown(context.Background()))
	}
	ctx := context.Background()
	want := createdVolume("default", "db", "vol-1")
	run(t, func(cat *catalog.Catalog) {
		_, err := cat.RegisterVolume(ctx, want)
		require.NoError(t, err)
		_, err = cat.RegisterVolume(ctx, createdVolume("other", "db", "vol-1"))
		require.Error(t, err)
		require.NotContains(t, err.Error(), secret)
	})
	run(t, func(cat *catalog.Catalog) {
		got, err := cat.GetVolume(ctx, "", "db")
		require.NoError(t, err)
		require.True(t, want.Equal(got), "every plugin-side field comes back after a restart")
		require.Equal(t, secret, got.Secrets["password"])
		stubs, err := cat.ListVolumes(ctx, "")
		require.NoError(t, err)
		listed, err := json.Marshal(stubs)
		require.NoError(t, err)
		require.NotContains(t, string(listed), secret)

		for _, printed := range []string{
			fmt.Sprintf("%v", got), fmt.Sprintf("%+v", got), fmt.Sprintf("%#v", got), fmt.Sprintf("%s", got.Secrets),
			got.Secrets.String(), mustJSON(t, got),
		} {
			require.NotContains(t, printed, secret)
		}
		require.Contains(t, mustJSON(t, got), `"password":"[redacted]"`, "the keys still show")
	})
	require.Contains(t, logs.String(), "catalog changed", "the catalog did log")
	require.NotContains(t, logs.String(), secret)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
