package csi

import (
	"maps"
	"slices"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/plugvisor/plugvisor/messages"
)

// PluginCapabilities is what a plugin's Identity service says it offers
// (GetPluginCapabilities). Unknown and UnknownVolumeExpansion keep, in the
// order first received and without repeats, the raw values this spec
// version does not name; they are never an error.
type PluginCapabilities struct {
	ControllerService                bool
	VolumeAccessibilityConstraints   bool
	GroupControllerService           bool
	SnapshotMetadataService          bool
	SnapshotAccessibilityConstraints bool
	OnlineVolumeExpansion            bool
	OfflineVolumeExpansion           bool
	// Unknown holds service types this spec version does not name.
	Unknown []int32
	// UnknownVolumeExpansion holds volume expansion types this spec
	// version does not name.
	UnknownVolumeExpansion []int32
}

// Spec 1.13 no longer names VOLUME_CONDITION, which drivers built on spec
// 1.12 still advertise: 11 among controller RPCs and 4 among node RPCs.
const (
	controllerVolumeCondition csipb.ControllerServiceCapability_RPC_Type = 11
	nodeVolumeCondition       csipb.NodeServiceCapability_RPC_Type       = 4
	volumeConditionName                                                  = "VOLUME_CONDITION"
)

// controllerRPCNames and nodeRPCNames are the spec's names of controller and
// node RPCs, with VOLUME_CONDITION at its spec 1.12 value.
var (
	controllerRPCNames = withName(csipb.ControllerServiceCapability_RPC_Type_name, int32(controllerVolumeCondition), volumeConditionName)
	nodeRPCNames       = withName(csipb.NodeServiceCapability_RPC_Type_name, int32(nodeVolumeCondition), volumeConditionName)
)

// withName returns a copy of names that also names value.
func withName(names map[int32]string, value int32, name string) map[int32]string {
	out := maps.Clone(names)
	out[value] = name
	return out
}

// ControllerCapabilities is the set of RPCs a plugin's Controller service
// supports (ControllerGetCapabilities). Unknown keeps the raw values this
// spec version does not name; 11 is read as VolumeCondition.
type ControllerCapabilities struct {
	CreateDeleteVolume        bool
	PublishUnpublishVolume    bool
	ListVolumes               bool
	GetCapacity               bool
	CreateDeleteSnapshot      bool
	ListSnapshots             bool
	CloneVolume               bool
	PublishReadonly           bool
	ExpandVolume              bool
	ListVolumesPublishedNodes bool
	GetVolume                 bool
	SingleNodeMultiWriter     bool
	ModifyVolume              bool
	GetSnapshot               bool
	GetVolumeHealth           bool
	ListVolumeHealth          bool
	// VolumeCondition is VOLUME_CONDITION (11), which spec 1.13 no longer names.
	VolumeCondition bool
	Unknown         []int32
}

// NodeCapabilities is the set of RPCs a plugin's Node service supports
// (NodeGetCapabilities). Unknown keeps the raw values this spec version
// does not name; 4 is read as VolumeCondition.
type NodeCapabilities struct {
	StageUnstageVolume    bool
	GetVolumeStats        bool
	ExpandVolume          bool
	SingleNodeMultiWriter bool
	VolumeMountGroup      bool
	GetVolumeHealth       bool
	GetStorageHealth      bool
	// VolumeCondition is VOLUME_CONDITION (4), which spec 1.13 no longer names.
	VolumeCondition bool
	Unknown         []int32
}

// setFlags sets the flag of each value through flag and returns the values
// that have none (flag returns nil), in order and without repeats.
func setFlags[T ~int32](values []T, flag func(T) *bool) []int32 {
	var unknown []int32
	for _, v := range values {
		if f := flag(v); f != nil {
			*f = true
		} else if !slices.Contains(unknown, int32(v)) {
			unknown = append(unknown, int32(v))
		}
	}
	return unknown
}

// pluginCapabilitiesFrom converts a GetPluginCapabilities answer. Entries
// whose type this spec version does not know at all (an unset oneof) are skipped.
func pluginCapabilitiesFrom(caps []*csipb.PluginCapability) PluginCapabilities {
	var services []csipb.PluginCapability_Service_Type
	var expansions []csipb.PluginCapability_VolumeExpansion_Type
	for _, c := range caps {
		if s := c.GetService(); s != nil {
			services = append(services, s.GetType())
		}
		if e := c.GetVolumeExpansion(); e != nil {
			expansions = append(expansions, e.GetType())
		}
	}
	var pc PluginCapabilities
	pc.Unknown = setFlags(services, pc.serviceFlag)
	pc.UnknownVolumeExpansion = setFlags(expansions, pc.expansionFlag)
	return pc
}

func (pc *PluginCapabilities) serviceFlag(t csipb.PluginCapability_Service_Type) *bool {
	switch t {
	case csipb.PluginCapability_Service_CONTROLLER_SERVICE:
		return &pc.ControllerService
	case csipb.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS:
		return &pc.VolumeAccessibilityConstraints
	case csipb.PluginCapability_Service_GROUP_CONTROLLER_SERVICE:
		return &pc.GroupControllerService
	case csipb.PluginCapability_Service_SNAPSHOT_METADATA_SERVICE:
		return &pc.SnapshotMetadataService
	case csipb.PluginCapability_Service_SNAPSHOT_ACCESSIBILITY_CONSTRAINTS:
		return &pc.SnapshotAccessibilityConstraints
	}
	return nil
}

func (pc *PluginCapabilities) expansionFlag(t csipb.PluginCapability_VolumeExpansion_Type) *bool {
	switch t {
	case csipb.PluginCapability_VolumeExpansion_ONLINE:
		return &pc.OnlineVolumeExpansion
	case csipb.PluginCapability_VolumeExpansion_OFFLINE:
		return &pc.OfflineVolumeExpansion
	}
	return nil
}

// rpcTypes returns the RPC type of each controller or node capability.
// Entries without an rpc (a capability kind this spec version does not
// know) are skipped.
func rpcTypes[C interface{ GetRpc() R }, R interface {
	comparable
	GetType() T
}, T ~int32](caps []C) []T {
	var types []T
	var noRPC R
	for _, c := range caps {
		if rpc := c.GetRpc(); rpc != noRPC {
			types = append(types, rpc.GetType())
		}
	}
	return types
}

// controllerCapabilitiesFrom converts a ControllerGetCapabilities answer.
func controllerCapabilitiesFrom(caps []*csipb.ControllerServiceCapability) ControllerCapabilities {
	var cc ControllerCapabilities
	cc.Unknown = setFlags(rpcTypes(caps), cc.flag)
	return cc
}

func (cc *ControllerCapabilities) flag(t csipb.ControllerServiceCapability_RPC_Type) *bool {
	switch t {
	case csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME:
		return &cc.CreateDeleteVolume
	case csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME:
		return &cc.PublishUnpublishVolume
	case csipb.ControllerServiceCapability_RPC_LIST_VOLUMES:
		return &cc.ListVolumes
	case csipb.ControllerServiceCapability_RPC_GET_CAPACITY:
		return &cc.GetCapacity
	case csipb.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT:
		return &cc.CreateDeleteSnapshot
	case csipb.ControllerServiceCapability_RPC_LIST_SNAPSHOTS:
		return &cc.ListSnapshots
	case csipb.ControllerServiceCapability_RPC_CLONE_VOLUME:
		return &cc.CloneVolume
	case csipb.ControllerServiceCapability_RPC_PUBLISH_READONLY:
		return &cc.PublishReadonly
	case csipb.ControllerServiceCapability_RPC_EXPAND_VOLUME:
		return &cc.ExpandVolume
	case csipb.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES:
		return &cc.ListVolumesPublishedNodes
	case csipb.ControllerServiceCapability_RPC_GET_VOLUME:
		return &cc.GetVolume
	case csipb.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER:
		return &cc.SingleNodeMultiWriter
	case csipb.ControllerServiceCapability_RPC_MODIFY_VOLUME:
		return &cc.ModifyVolume
	case csipb.ControllerServiceCapability_RPC_GET_SNAPSHOT:
		return &cc.GetSnapshot
	case csipb.ControllerServiceCapability_RPC_GET_VOLUME_HEALTH:
		return &cc.GetVolumeHealth
	case csipb.ControllerServiceCapability_RPC_LIST_VOLUME_HEALTH:
		return &cc.ListVolumeHealth
	case controllerVolumeCondition:
		return &cc.VolumeCondition
	}
	return nil
}

// nodeCapabilitiesFrom converts a NodeGetCapabilities answer.
func nodeCapabilitiesFrom(caps []*csipb.NodeServiceCapability) NodeCapabilities {
	var nc NodeCapabilities
	nc.Unknown = setFlags(rpcTypes(caps), nc.flag)
	return nc
}

func (nc *NodeCapabilities) flag(t csipb.NodeServiceCapability_RPC_Type) *bool {
	switch t {
	case csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME:
		return &nc.StageUnstageVolume
	case csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS:
		return &nc.GetVolumeStats
	case csipb.NodeServiceCapability_RPC_EXPAND_VOLUME:
		return &nc.ExpandVolume
	case csipb.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER:
		return &nc.SingleNodeMultiWriter
	case csipb.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP:
		return &nc.VolumeMountGroup
	case csipb.NodeServiceCapability_RPC_GET_VOLUME_HEALTH:
		return &nc.GetVolumeHealth
	case csipb.NodeServiceCapability_RPC_GET_STORAGE_HEALTH:
		return &nc.GetStorageHealth
	case nodeVolumeCondition:
		return &nc.VolumeCondition
	}
	return nil
}

// CapabilityNames lists capabilities by their CSI names (volume expansion
// types prefixed "VOLUME_EXPANSION_"), each list in the order of the CSI
// enum. unknown holds the values this spec version does not name, in the
// order: plugin services, volume expansions, controller or node RPCs.
func CapabilityNames(pc *PluginCapabilities, cc *ControllerCapabilities, nc *NodeCapabilities) *messages.CSICapabilities {
	caps := &messages.CSICapabilities{
		Plugin: slices.Concat(
			flagNames(csipb.PluginCapability_Service_Type_name, "", pc.serviceFlag),
			flagNames(csipb.PluginCapability_VolumeExpansion_Type_name, "VOLUME_EXPANSION_", pc.expansionFlag)),
		Unknown: slices.Concat(pc.Unknown, pc.UnknownVolumeExpansion),
	}
	if cc != nil {
		caps.Controller = flagNames(controllerRPCNames, "", cc.flag)
		caps.Unknown = append(caps.Unknown, cc.Unknown...)
	}
	if nc != nil {
		caps.Node = flagNames(nodeRPCNames, "", nc.flag)
		caps.Unknown = append(caps.Unknown, nc.Unknown...)
	}
	return caps
}

// flagNames returns, in the order of the enum's values, prefix plus the name
// of each value whose flag is set.
func flagNames[T ~int32](names map[int32]string, prefix string, flag func(T) *bool) []string {
	var out []string
	for _, v := range slices.Sorted(maps.Keys(names)) {
		if f := flag(T(v)); f != nil && *f {
			out = append(out, prefix+names[v])
		}
	}
	return out
}
