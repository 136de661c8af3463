package model

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// pluginSideVolume is fullVolume with every plugin-side field set.
func pluginSideVolume() *CSIVolume {
	v := fullVolume()
	v.ExternalID, v.CapacityBytes, v.Created, v.Deleting = "vol-1", 4096, true, true
	v.Parameters = map[string]string{"tier": "fast"}
	v.Secrets = Secrets{"key": "s3cr3t-value"}
	v.Context = map[string]string{"path": "/srv/vol-1"}
	v.MountOptions = &MountOptions{FSType: "xfs", MountFlags: []string{"noatime", "nodev"}}
	v.RequestedTopologies = []*Topology{zone("a")}
	return v
}

func TestPluginSideFieldsAreCopiedDeeplyAndRoundTripThroughProto(t *testing.T) {
	v := pluginSideVolume()
	require.NoError(t, v.Validate())
	cp := v.Copy()
	require.Equal(t, v, cp)
	requireNoSharing(t, v, cp)
	cp.Parameters["tier"], cp.Secrets["key"], cp.Context["path"] = "x", "x", "x"
	cp.MountOptions.MountFlags[0], cp.RequestedTopologies[0].Segments["zone"] = "x", "x"
	require.Equal(t, pluginSideVolume(), v, "mutating the copy changed nothing of the original")

	back := VolumeFromProto(v.Proto())
	require.Equal(t, v, back, "every field survives the trip, secrets included")
	require.Empty(t, v.StubProto().GetVolume().GetSecrets(), "a list stub carries no secrets")
}

func TestEqualComparesThePluginSideDescription(t *testing.T) {
	changes := map[string]func(v *CSIVolume){
		"another external ID":        func(v *CSIVolume) { v.ExternalID = "vol-2" },
		"another capacity":           func(v *CSIVolume) { v.CapacityBytes++ },
		"another parameter":          func(v *CSIVolume) { v.Parameters["tier"] = "slow" },
		"another secret":             func(v *CSIVolume) { v.Secrets["key"] = "other" },
		"another context":            func(v *CSIVolume) { v.Context = nil },
		"other mount flags":          func(v *CSIVolume) { v.MountOptions.MountFlags = nil },
		"other requested topologies": func(v *CSIVolume) { v.RequestedTopologies = nil },
		"registered, not created":    func(v *CSIVolume) { v.Created = false },
	}
	for name, change := range changes {
		t.Run(name, func(t *testing.T) {
			v := pluginSideVolume()
			change(v)
			require.False(t, pluginSideVolume().Equal(v))
		})
	}
	v := pluginSideVolume()
	v.Deleting = false
	require.True(t, pluginSideVolume().Equal(v), "Deleting is state, not description")
	noID := NewCSIVolume("vol-9", 0)
	withID := noID.Copy()
	withID.ExternalID = "vol-9"
	require.True(t, noID.Equal(withID), "an empty external ID is the volume's own ID")
	require.Equal(t, "vol-9", noID.PluginVolumeID())
}
