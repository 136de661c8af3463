package model

import (
	"maps"
	"slices"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

// csiAccessModes maps the catalog's access modes to CSI's.
var csiAccessModes = map[AccessMode]csipb.VolumeCapability_AccessMode_Mode{
	AccessModeSingleNodeReader:      csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
	AccessModeSingleNodeWriter:      csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
	AccessModeMultiNodeReader:       csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY,
	AccessModeMultiNodeSingleWriter: csipb.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER,
	AccessModeMultiNodeMultiWriter:  csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER,
}

// VolumeCapability is the CSI volume capability of a volume used with
// access and attachment: the access mode, and a block access type or a
// mount access type carrying opts (nil for none). An unknown access mode
// gives CSI's UNKNOWN, which plugins refuse.
func VolumeCapability(access AccessMode, attachment AttachmentMode, opts *MountOptions) *csipb.VolumeCapability {
	c := &csipb.VolumeCapability{AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csiAccessModes[access]}}
	if attachment == AttachmentModeBlockDevice {
		c.AccessType = &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}
		return c
	}
	m := &csipb.VolumeCapability_MountVolume{}
	if opts != nil {
		m.FsType, m.MountFlags = opts.FSType, slices.Clone(opts.MountFlags)
	}
	c.AccessType = &csipb.VolumeCapability_Mount{Mount: m}
	return c
}

// Capability is the CSI volume capability of v: its own modes and mount
// options.
func (v *CSIVolume) Capability() *csipb.VolumeCapability {
	return VolumeCapability(v.AccessMode, v.AttachmentMode, v.MountOptions)
}

// TopologiesToCSI returns ts as CSI topologies (nil for none).
func TopologiesToCSI(ts []*Topology) []*csipb.Topology {
	var out []*csipb.Topology
	for _, t := range ts {
		if t != nil {
			out = append(out, &csipb.Topology{Segments: maps.Clone(t.Segments)})
		}
	}
	return out
}

// TopologiesFromCSI returns CSI topologies as the catalog's (nil for none).
func TopologiesFromCSI(ts []*csipb.Topology) []*Topology {
	var out []*Topology
	for _, t := range ts {
		out = append(out, &Topology{Segments: maps.Clone(t.GetSegments())})
	}
	return out
}
