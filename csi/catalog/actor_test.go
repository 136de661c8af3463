package catalog_test

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/csi/catalog"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
)

func TestCatalogShutdownFinishesAcceptedWritesAndRefusesLaterOnes(t *testing.T) {
	f := startCatFixture(t, catMemoryBucket(t))
	ctx := context.Background()

	f.manager.Send(f.cat.PID(), &messages.RegisterVolume{Volume: catVolume("db", "hostpath", model.AccessModeSingleNodeWriter).Proto()})
	f.manager.Send(f.cat.PID(), &messages.ShutdownCatalog{})
	f.manager.Send(f.cat.PID(), &messages.RegisterVolume{Volume: catVolume("web", "hostpath", model.AccessModeSingleNodeWriter).Proto()})
	// The refusal is answered at once, the accepted write once durable, and
	// the shutdown once no write is left: their order depends on the disk.
	answers := map[string]proto.Message{}
	var order []string
	for range 3 {
		got := probe.Expect[proto.Message](t, f.manager, catWait)
		name := string(got.ProtoReflect().Descriptor().Name())
		if resp, ok := got.(*messages.RegisterVolumeResponse); ok && resp.GetError() == nil {
			name = "accepted"
		}
		answers[name] = got
		order = append(order, name)
	}
	require.Contains(t, answers, "accepted", "a write accepted before the shutdown is finished")
	require.Less(t, slices.Index(order, "accepted"), slices.Index(order, "ShutdownCatalogResponse"),
		"the shutdown is answered once the accepted write is durable")
	refused := answers["RegisterVolumeResponse"].(*messages.RegisterVolumeResponse)
	require.ErrorIs(t, messages.ErrorFromProto(refused.GetError()), catalog.ErrShutdown)
	require.Equal(t, "db", f.volume("", "db").ID, "queries still answer until the actor stops")

	require.NoError(t, f.cat.Shutdown(ctx))
	require.NoError(t, f.cat.Shutdown(ctx), "a second shutdown is a no-op")
	_, err := f.cat.GetVolume(ctx, "", "db")
	require.ErrorIs(t, err, catalog.ErrShutdown)
	require.ErrorIs(t, f.cat.Claim(ctx, catClaim("db", "a1", false)), catalog.ErrShutdown)
}

func TestCatalogStartRefusesABadConfig(t *testing.T) {
	system := probe.NewSystem(t)
	tests := []struct {
		name string
		cfg  catalog.Config
	}{
		{"no bucket", catalog.Config{NodeID: catNode}},
		{"no node ID", catalog.Config{Bucket: catMemoryBucket(t)}},
		{"a node ID that climbs out", catalog.Config{Bucket: catMemoryBucket(t), NodeID: "../node"}},
		{"a negative volume limit", catalog.Config{Bucket: catMemoryBucket(t), NodeID: catNode, MaxVolumes: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := catalog.Start(system, tt.cfg)
			require.ErrorIs(t, err, model.ErrInvalid)
		})
	}
}
