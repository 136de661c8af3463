package messages_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/messages"
)

// TestTheCatalogsWritesAreCatalogWritesAndNothingElseIs: the catalog
// takes every command of catalog.proto that changes it as one case, over
// CatalogWrite; its queries and its shutdown are no CatalogWrite, so they
// never reach that case.
func TestTheCatalogsWritesAreCatalogWritesAndNothingElseIs(t *testing.T) {
	for _, m := range []proto.Message{
		&messages.RegisterVolume{}, &messages.DeregisterVolume{}, &messages.RegisterVolumes{}, &messages.DeregisterVolumes{},
		&messages.ClaimVolume{}, &messages.ReleaseVolume{}, &messages.MarkVolumeDeleting{}, &messages.RecordVolumeCapacity{},
		&messages.ExpectPlugin{}, &messages.RecordVolumeModify{},
	} {
		_, ok := m.(messages.CatalogWrite)
		require.True(t, ok, "%T is a write of the catalog", m)
	}
	for _, m := range []proto.Message{
		&messages.ListVolumesRequest{}, &messages.GetVolumeRequest{}, &messages.ListCatalogPluginsRequest{},
		&messages.ShutdownCatalog{}, &messages.CSIPluginFingerprinted{},
	} {
		_, ok := m.(messages.CatalogWrite)
		require.False(t, ok, "%T is no write of the catalog's callers", m)
	}
}
