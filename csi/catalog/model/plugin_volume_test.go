package model

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// pluginSideVolume is fullVolume with every plugin-side field set.
func pluginSideVolume() *CSIVolume {
	v := fullVolume()
	v.ExternalID, v.CapacityBytes, v.Created, v.Deleting = "vol-1", 4096, true, true
	v.Parameters = map[string]string{"tier": "fast"}
	v.MutableParameters = map[string]string{"iops": "5000"}
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
	cp.Parameters["tier"], cp.Secrets["key"], cp.Context["path"], cp.MutableParameters["iops"] = "x", "x", "x", "x"
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
	v.Deleting, v.MutableParameters = false, nil
	require.True(t, pluginSideVolume().Equal(v), "Deleting and the mutable parameters are state, not description")
	noID := NewCSIVolume("vol-9", 0)
	withID := noID.Copy()
	withID.ExternalID = "vol-9"
	require.True(t, noID.Equal(withID), "an empty external ID is the volume's own ID")
	require.Equal(t, "vol-9", noID.PluginVolumeID())
}

func TestRecordModifyOnMergesTheMutableParametersAndARegistrationKeepsThem(t *testing.T) {
	v := healthyVolume(AccessModeSingleNodeWriter)
	first, err := RecordModifyOn(v, map[string]string{"iops": "5000", "tier": "fast"})
	require.NoError(t, err)
	require.Empty(t, v.MutableParameters, "v is never changed")
	second, err := RecordModifyOn(first, map[string]string{"tier": "slow"})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"iops": "5000", "tier": "slow"}, second.MutableParameters, "a key given again takes its new value")
	same, err := RecordModifyOn(second, map[string]string{"iops": "5000"})
	require.NoError(t, err)
	require.Same(t, second, same, "what changes nothing returns the volume itself")

	again := second.Copy()
	again.MutableParameters = nil
	again.Parameters = map[string]string{"new": "description"}
	registered, err := RegisterOver(second, again)
	require.NoError(t, err)
	require.Equal(t, second.MutableParameters, registered.MutableParameters, "a registration keeps them")

	full := map[string]string{}
	for i := range MaxMutableParameters {
		full[fmt.Sprint("k", i)] = "v"
	}
	deleting := second.Copy()
	deleting.Deleting = true
	for name, c := range map[string]struct {
		v      *CSIVolume
		params map[string]string
		want   error
		text   string
	}{
		"none":           {second, nil, ErrInvalid, "mutable_parameters must not be empty"},
		"an empty key":   {second, map[string]string{"": "x"}, ErrInvalid, "mutable_parameters has an empty key"},
		"over the limit": {second, full, ErrInvalid, "over the limit of 256"},
		"a deleting one": {deleting, map[string]string{"tier": "x"}, ErrVolumeDeleting, "being deleted"},
	} {
		_, err := RecordModifyOn(c.v, c.params)
		require.ErrorIs(t, err, c.want, name)
		require.ErrorContains(t, err, c.text, name)
	}
	require.Equal(t, map[string]string{"iops": "5000", "tier": "slow"}, second.MutableParameters, "refusals change nothing")
}

// TestARegistrationOfAnotherPluginVolumeKeepsNoMutableParameters: the
// parameters a modify set belong to the plugin's volume, so a new
// description that names another plugin volume, or another plugin, starts
// without them; one of the same plugin volume keeps them.
func TestARegistrationOfAnotherPluginVolumeKeepsNoMutableParameters(t *testing.T) {
	v, err := RecordModifyOn(healthyVolume(AccessModeSingleNodeWriter), map[string]string{"iops": "5000"})
	require.NoError(t, err)
	for name, change := range map[string]func(*CSIVolume){
		"another plugin volume": func(n *CSIVolume) { n.ExternalID = "vol-other" },
		"another plugin":        func(n *CSIVolume) { n.PluginID = "other-plugin" },
	} {
		again := v.Copy()
		again.MutableParameters = nil
		change(again)
		registered, err := RegisterOver(v, again)
		require.NoError(t, err, name)
		require.Empty(t, registered.MutableParameters, name)
	}
	same := v.Copy()
	same.MutableParameters = nil
	registered, err := RegisterOver(v, same)
	require.NoError(t, err)
	require.Equal(t, v.MutableParameters, registered.MutableParameters)
}
