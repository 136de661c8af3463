package fleet

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
)

const fuzzKey = "/plugvisor/volumes/default/db"

// FuzzDecodeRecord feeds the record decoder any bytes: it never panics, a
// record it accepts encodes back to the same bytes, and a record it
// refuses is corruption naming the key.
func FuzzDecodeRecord(f *testing.F) {
	good, err := encodeRecord(fuzzKey, &messages.CatalogVolume{Id: "db", Namespace: "default", PluginId: "ebs"})
	require.NoError(f, err)
	f.Add([]byte(good))
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte(good)[:len(good)-1])
	f.Fuzz(func(t *testing.T, value []byte) {
		var m messages.CatalogVolume
		err := decodeRecord(fuzzKey, value, &m)
		if err != nil {
			require.ErrorIs(t, err, model.ErrCorrupt)
			require.Contains(t, err.Error(), fuzzKey)
			return
		}
		again, err := encodeRecord(fuzzKey, &m)
		require.NoError(t, err)
		var back messages.CatalogVolume
		require.NoError(t, decodeRecord(fuzzKey, []byte(again), &back))
		require.True(t, proto.Equal(&m, &back))
	})
}

func TestARecordIsBoundToItsKeyAndItsBytes(t *testing.T) {
	good, err := encodeRecord(fuzzKey, &messages.CatalogVolume{Id: "db", Namespace: "default", PluginId: "ebs"})
	require.NoError(t, err)
	flipped := []byte(good)
	flipped[len(flipped)-1] ^= 1
	tests := []struct {
		name  string
		key   string
		value []byte
	}{
		{"a flipped bit", fuzzKey, flipped},
		{"the record under another key", "/plugvisor/volumes/default/other", []byte(good)},
		{"a value shorter than its checksum", fuzzKey, []byte{1, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m messages.CatalogVolume
			err := decodeRecord(tt.key, tt.value, &m)
			require.ErrorIs(t, err, model.ErrCorrupt)
			require.Contains(t, err.Error(), tt.key)
		})
	}
	var m messages.CatalogVolume
	require.NoError(t, decodeRecord(fuzzKey, []byte(good), &m))
	require.Equal(t, "ebs", m.GetPluginId())
}
