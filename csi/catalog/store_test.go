package catalog_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi/catalog"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/storage"
	"github.com/plugvisor/plugvisor/storage/storagetest"
)

func TestCatalogComesBackFromItsBoltFileAfterARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	ctx := context.Background()

	var before catDump
	t.Run("first run", func(t *testing.T) {
		f := startCatFixture(t, catBoltBucket(t, path))
		f.feed(catNodeFingerprint("hostpath", "p1", true))                        // 1
		f.register(catVolume("db", "hostpath", model.AccessModeSingleNodeWriter)) // 2
		web := catVolume("web", "hostpath", model.AccessModeMultiNodeReader)
		web.Namespace = "prod"
		f.register(web)                                                            // 3
		require.NoError(t, f.cat.Claim(ctx, catClaim("db", "a1", false)))          // 4
		f.register(catVolume("tmp", "hostpath", model.AccessModeSingleNodeWriter)) // 5
		require.NoError(t, f.cat.DeregisterVolume(ctx, "", "tmp"))                 // 6
		before = f.dump()
		require.Equal(t, uint64(4), before.lastIndex(), "what is left shows index 4; the deregistration took 6")
	})

	t.Run("second run", func(t *testing.T) {
		f := startCatFixture(t, catBoltBucket(t, path))
		after := f.dump()
		require.Len(t, after.volumes, len(before.volumes))
		for i, v := range after.volumes {
			was := before.volumes[i]
			require.True(t, was.Equal(v), "volume %s/%s comes back as it was", v.Namespace, v.ID)
			require.Equal(t, was.CreateIndex, v.CreateIndex)
			require.Equal(t, [3]map[string]*model.Claim{was.ReadClaims, was.WriteClaims, was.PastClaims},
				[3]map[string]*model.Claim{v.ReadClaims, v.WriteClaims, v.PastClaims}, "claims come back")
			require.False(t, v.Schedulable, "health is not trusted across a restart")
			require.Equal(t, uint64(7), v.ModifyIndex, "distrusting health took index 7, after the deregistration's 6")
		}
		p := f.plugin("hostpath")
		require.Equal(t, 0, p.NodesHealthy)
		require.Equal(t, "p1", p.Nodes[catNode].AllocID)
		require.Contains(t, p.Nodes[catNode].HealthDescription, "restored at start")
		require.ErrorIs(t, f.cat.Claim(ctx, catClaim("db", "a2", true)), model.ErrVolumeUnschedulable)

		f.feed(catNodeFingerprint("hostpath", "p1", true)) // 8: the manager's replay
		require.True(t, f.volume("", "db").Schedulable)
		require.ErrorIs(t, f.cat.Claim(ctx, catClaim("db", "a2", false)), model.ErrVolumeMaxClaims, "a1 still holds the write claim")
		require.Equal(t, uint64(9), f.register(catVolume("tmp", "hostpath", model.AccessModeSingleNodeWriter)).CreateIndex,
			"indexes keep growing")
	})
}

func TestCatalogRefusesToStartFromACorruptRecord(t *testing.T) {
	record := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		require.NoError(t, err)
		return b
	}
	good := catVolume("db", "hostpath", model.AccessModeSingleNodeWriter).Proto()
	badMode := catVolume("db", "hostpath", "single-node-admin").Proto()
	tests := []struct {
		name       string
		key        string
		value      []byte
		wantDetail string
	}{
		{"a volume record that does not decode", "volume/default/db", []byte{0xff, 0xff, 0xff}, "cannot parse"},
		{"a volume record under another volume's key", "volume/default/web", record(good), "holds volume default/db"},
		{"a volume record with an unknown access mode", "volume/default/db", record(badMode), "unknown access mode"},
		{"a plugin record that does not decode", "plugin/hostpath", []byte{0x0a}, "cannot parse"},
		{"a plugin record under another plugin's key", "plugin/nfs", record(&messages.CatalogPlugin{Id: "hostpath"}), `holds plugin "hostpath"`},
		{"a plugin record with an instance of another plugin", "plugin/hostpath", record(&messages.CatalogPlugin{
			Id: "hostpath", Nodes: map[string]*messages.CatalogInstance{catNode: {PluginId: "nfs", AllocId: "a1", NodeInfo: &messages.CatalogNodeInfo{}}},
		}), `is for plugin "nfs"`},
		{"an index record that does not decode", "index", []byte{0x08}, "cannot parse"},
		{"a record that is not the catalog's", "registry/thing", []byte{}, "not a catalog record"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, err := storage.OpenBolt(filepath.Join(t.TempDir(), "state.db"), storage.BoltOptions{})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, store.Close()) })
			bucket, err := store.Bucket(catalog.Bucket)
			require.NoError(t, err)
			require.NoError(t, bucket.Apply([]storage.Op{storage.Put([]byte(tt.key), tt.value)}))

			system := probe.NewSystem(t)
			_, err = catalog.Start(system, catalog.Config{Bucket: bucket, NodeID: catNode, Logger: probe.Logger(t)})
			require.ErrorIs(t, err, model.ErrCorrupt)
			require.ErrorIs(t, err, storage.ErrCorrupt, "the store's one kind of corruption, with its one remedy")
			require.Contains(t, err.Error(), `bucket "csi.catalog", record "`+tt.key+`"`)
			require.Contains(t, err.Error(), tt.wantDetail)
			require.Contains(t, err.Error(), "-reset-corrupt-state", "the error names the flag that recovers")
		})
	}
}

func TestCatalogRollsBackWhenTheStoreFails(t *testing.T) {
	bucket := &storagetest.FlakyBucket{Bucket: catMemoryBucket(t)}
	f := startCatFixture(t, bucket)
	ctx := context.Background()
	f.feed(catNodeFingerprint("hostpath", "p1", true))
	f.register(catVolume("db", "hostpath", model.AccessModeSingleNodeWriter))
	before := f.dump()

	bucket.Failing.Store(true)
	_, err := f.cat.RegisterVolume(ctx, catVolume("web", "hostpath", model.AccessModeSingleNodeWriter))
	require.ErrorIs(t, err, model.ErrStore)
	require.Contains(t, err.Error(), storagetest.ErrNoSpace.Error())
	require.ErrorIs(t, f.cat.Claim(ctx, catClaim("db", "a1", false)), model.ErrStore)
	require.Equal(t, before, f.dump(), "nothing that failed to be stored is shown")

	bucket.Failing.Store(false)
	web := f.register(catVolume("web", "hostpath", model.AccessModeSingleNodeWriter))
	require.Equal(t, before.lastIndex()+1, web.CreateIndex, "the failed writes gave their indexes back")
	require.NoError(t, f.cat.Claim(ctx, catClaim("db", "a1", false)))
}
