package catalog_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/messages"
)

func TestCatalogRecordsAModifysMutableParametersWhileClaimedAndKeepsThemAcrossARestart(t *testing.T) {
	ctx := context.Background()
	catTwoRuns(t, []*messages.CSIFingerprint{catNodeFingerprint("hostpath", "p1", true)}, func(t *testing.T, f *catFixture) {
		f.register(createdVolume("default", "db", "vol-1"))
		require.NoError(t, f.cat.Claim(ctx, catClaim("db", "a1", false)))

		v, err := f.cat.RecordVolumeModify(ctx, "", "db", map[string]string{"iops": "5000", "tier": "fast"})
		require.NoError(t, err)
		require.Equal(t, map[string]string{"iops": "5000", "tier": "fast"}, v.MutableParameters)
		require.Contains(t, v.WriteClaims, "a1", "a modify keeps the claims")
		v, err = f.cat.RecordVolumeModify(ctx, "", "db", map[string]string{"tier": "slow"})
		require.NoError(t, err)
		require.Equal(t, map[string]string{"iops": "5000", "tier": "slow"}, v.MutableParameters, "merged, the later value winning")

		before := f.dump()
		for _, bad := range []struct {
			id     string
			params map[string]string
			want   error
		}{
			{"db", nil, model.ErrInvalid},
			{"db", map[string]string{"": "x"}, model.ErrInvalid},
			{"nope", map[string]string{"k": "v"}, model.ErrVolumeNotFound},
			{"../db", map[string]string{"k": "v"}, model.ErrInvalid},
		} {
			_, err := f.cat.RecordVolumeModify(ctx, "", bad.id, bad.params)
			require.ErrorIs(t, err, bad.want, "%s %v", bad.id, bad.params)
		}
		require.Equal(t, before, f.dump(), "refusals change nothing")
		require.NoError(t, f.cat.Release(ctx, catClaim("db", "a1", false)))
	}, "second run", func(t *testing.T, f *catFixture) {
		want := map[string]string{"iops": "5000", "tier": "slow"}
		require.Equal(t, want, f.volume("", "db").MutableParameters, "the record on disk holds them")
		again := createdVolume("default", "db", "vol-1")
		again.Parameters = map[string]string{"tier": "described anew"}
		require.Equal(t, want, f.register(again).MutableParameters, "a registration keeps them")
	})
}

func TestCatalogsInClusterModeRecordAModifysMutableParametersInEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	a, b := startClusterNode(t, srv, "node-a"), startClusterNode(t, srv, "node-b")
	ctx := context.Background()
	_, err := a.cat.RegisterVolume(ctx, createdVolume("default", "db", "vol-1"))
	require.NoError(t, err)

	v, err := b.cat.RecordVolumeModify(ctx, "", "db", map[string]string{"iops": "5000"})
	require.NoError(t, err, "through another node than the one that registered it")
	require.Equal(t, map[string]string{"iops": "5000"}, v.MutableParameters)
	_, err = a.cat.RecordVolumeModify(ctx, "", "db", map[string]string{"tier": "slow"})
	require.NoError(t, err)
	_, err = b.cat.RecordVolumeModify(ctx, "", "db", map[string]string{"": "x"})
	require.ErrorIs(t, err, model.ErrInvalid)

	again := createdVolume("default", "db", "vol-1")
	again.Parameters = map[string]string{"tier": "described anew"}
	_, err = b.cat.RegisterVolume(ctx, again)
	require.NoError(t, err)
	got, err := a.cat.GetVolume(ctx, "", "db")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"iops": "5000", "tier": "slow"}, got.MutableParameters,
		"the fleet's record holds both modifies, and a registration keeps them")
}
