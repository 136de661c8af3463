package model

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTopologyRefusalRefusesTheFirstVolumeWithoutTheTopologyItsPluginRequires(t *testing.T) {
	zoned := NewCSIPlugin("zoned", 1)
	info := fingerprint("a1", true, false, true)
	info.PluginID, info.RequiresTopologies = "zoned", true
	require.NoError(t, zoned.AddPlugin("n1", info))
	plugins := map[string]*CSIPlugin{"zoned": zoned}
	volume := func(id, plugin string) *CSIVolume {
		v := NewCSIVolume(id, 0)
		v.PluginID = plugin
		return v
	}
	placed := volume("placed", "zoned")
	placed.Topologies = []*Topology{{Segments: map[string]string{"zone": "a"}}}
	created := volume("created", "zoned")
	created.Created = true

	for _, tt := range []struct {
		name  string
		vs    []*CSIVolume
		batch bool
		want  string // "" for no refusal
	}{
		{"a volume with a topology", []*CSIVolume{placed}, false, ""},
		{"a volume its plugin created", []*CSIVolume{created}, false, ""},
		{"a volume of a plugin that requires none", []*CSIVolume{volume("free", "ebs")}, false, ""},
		{"a volume without one", []*CSIVolume{volume("bare", "zoned")}, false, `volume default/bare: topologies`},
		{"a batch's item without one is named", []*CSIVolume{placed, volume("bare", "zoned")}, true, `volumes[1] (volume "bare")`},
		{"no volume", nil, true, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := TopologyRefusal(tt.vs, plugins, tt.batch)
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrTopologyRequired)
			require.ErrorIs(t, err, ErrInvalid)
			require.ErrorContains(t, err, tt.want)
		})
	}
}
