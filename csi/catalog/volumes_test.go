package catalog_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi/catalog"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
)

func TestCatalogRegistersListsGetsAndDeregistersVolumes(t *testing.T) {
	f := startCatFixture(t, catMemoryBucket(t))
	ctx := context.Background()

	db := f.register(catVolume("db", "hostpath", model.AccessModeSingleNodeWriter))
	require.Equal(t, model.DefaultNamespace, db.Namespace, "an empty namespace is the default one")
	require.Equal(t, [2]uint64{1, 1}, [2]uint64{db.CreateIndex, db.ModifyIndex})
	require.False(t, db.Schedulable, "a volume of a plugin never seen is unschedulable")

	web := catVolume("web", "hostpath", model.AccessModeMultiNodeMultiWriter)
	web.Namespace = "prod"
	web.Topologies = []*model.Topology{{Segments: map[string]string{"zone": "a"}}}
	resp, err := catAsk[*messages.RegisterVolumeResponse](f, &messages.RegisterVolume{Volume: web.Proto()})
	require.NoError(t, err)
	require.Equal(t, uint64(2), resp.GetVolume().GetCreateIndex())

	all, err := f.cat.ListVolumes(ctx, "")
	require.NoError(t, err)
	require.Equal(t, []string{"default/db", "prod/web"}, catStubNames(all))
	prod, err := f.cat.ListVolumes(ctx, "prod")
	require.NoError(t, err)
	require.Equal(t, []string{"prod/web"}, catStubNames(prod))
	require.Equal(t, web.Topologies, prod[0].Topologies)

	require.Equal(t, db, f.volume("", "db"))
	got, err := catAsk[*messages.GetVolumeResponse](f, &messages.GetVolumeRequest{Namespace: "prod", VolumeId: "web"})
	require.NoError(t, err)
	require.Equal(t, uint64(2), got.GetVolume().GetModifyIndex())

	again := f.register(catVolume("db", "hostpath", model.AccessModeSingleNodeWriter))
	require.Equal(t, db, again, "registering the same description again changes nothing")

	changed := catVolume("db", "hostpath", model.AccessModeSingleNodeWriter)
	changed.Topologies = []*model.Topology{{Segments: map[string]string{"zone": "b"}}}
	changed = f.register(changed)
	require.Equal(t, [2]uint64{1, 3}, [2]uint64{changed.CreateIndex, changed.ModifyIndex}, "a change keeps the create index")

	require.NoError(t, f.cat.DeregisterVolume(ctx, "", "db"))
	_, err = f.cat.GetVolume(ctx, "", "db")
	require.ErrorIs(t, err, model.ErrVolumeNotFound)
	require.ErrorIs(t, f.cat.DeregisterVolume(ctx, "", "db"), model.ErrVolumeNotFound)
	all, err = f.cat.ListVolumes(ctx, "")
	require.NoError(t, err)
	require.Equal(t, []string{"prod/web"}, catStubNames(all))

	next := f.register(catVolume("db", "hostpath", model.AccessModeSingleNodeWriter))
	require.Equal(t, uint64(5), next.CreateIndex, "the deregistration took index 4")
}

func TestCatalogRefusesANewVolumeBeyondItsLimitAndChangesNothing(t *testing.T) {
	ctx := context.Background()
	bucket := catMemoryBucket(t)
	system := probe.NewSystem(t)
	cat, err := catalog.Start(system, catalog.Config{Bucket: bucket, NodeID: catNode, Logger: probe.Logger(t), MaxVolumes: 2})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cat.Shutdown(ctx)) })
	f := &catFixture{t: t, system: system, cat: cat}
	f.register(catVolume("a", "hostpath", model.AccessModeSingleNodeWriter))
	other := catVolume("b", "hostpath", model.AccessModeSingleNodeWriter)
	other.Namespace = "team"
	f.register(other) // the limit counts every namespace
	require.NoError(t, cat.CheckRoom("", "a"), "a volume already there has room")
	before := f.dump()

	err = cat.CheckRoom("", "c")
	require.ErrorIs(t, err, model.ErrVolumeLimit)
	_, err = cat.RegisterVolume(ctx, catVolume("c", "hostpath", model.AccessModeSingleNodeWriter))
	require.ErrorIs(t, err, model.ErrVolumeLimit)
	require.ErrorContains(t, err, "volume default/c: the catalog holds 2 volumes, the limit")
	require.ErrorContains(t, err, "agent flag -max-volumes", "the error names the flag that raises it")
	require.Equal(t, before, f.dump(), "the refusal changed nothing")

	changed := catVolume("a", "hostpath", model.AccessModeMultiNodeReader)
	require.Equal(t, model.AccessModeMultiNodeReader, f.register(changed).AccessMode, "a volume already there can change")

	require.NoError(t, cat.DeregisterVolume(ctx, "team", "b"))
	require.NoError(t, cat.CheckRoom("", "c"))
	f.register(catVolume("c", "hostpath", model.AccessModeSingleNodeWriter))
	stubs, err := cat.ListVolumes(ctx, "")
	require.NoError(t, err)
	require.Equal(t, []string{"default/a", "default/c"}, catStubNames(stubs))
}
