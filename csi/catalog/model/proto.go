package model

import (
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/plugvisor/plugvisor/messages"
)

// This file converts the model to and from its protobuf form
// (messages/catalog.proto), which the catalog actor sends in its answers and
// keeps on disk, and turns the CSI manager's fingerprints into CSIInfo.
// Decoding never validates: callers run Validate on what they decoded.

// capability ties a CSI capability name to the flag of the model that says
// the plugin has it.
type capability[T any] struct {
	name string
	flag func(*T) *bool
}

// controllerCapabilities are the controller capabilities the model names.
var controllerCapabilities = []capability[ControllerInfo]{
	{"CREATE_DELETE_VOLUME", func(c *ControllerInfo) *bool { return &c.SupportsCreateDelete }},
	{"PUBLISH_UNPUBLISH_VOLUME", func(c *ControllerInfo) *bool { return &c.SupportsAttachDetach }},
	{"LIST_VOLUMES", func(c *ControllerInfo) *bool { return &c.SupportsListVolumes }},
	{"GET_CAPACITY", func(c *ControllerInfo) *bool { return &c.SupportsGetCapacity }},
	{"CREATE_DELETE_SNAPSHOT", func(c *ControllerInfo) *bool { return &c.SupportsCreateDeleteSnapshot }},
	{"LIST_SNAPSHOTS", func(c *ControllerInfo) *bool { return &c.SupportsListSnapshots }},
	{"CLONE_VOLUME", func(c *ControllerInfo) *bool { return &c.SupportsClone }},
	{"PUBLISH_READONLY", func(c *ControllerInfo) *bool { return &c.SupportsReadOnlyAttach }},
	{"EXPAND_VOLUME", func(c *ControllerInfo) *bool { return &c.SupportsExpand }},
	{"LIST_VOLUMES_PUBLISHED_NODES", func(c *ControllerInfo) *bool { return &c.SupportsListVolumesPublishedNodes }},
	{"VOLUME_CONDITION", func(c *ControllerInfo) *bool { return &c.SupportsCondition }},
	{"GET_VOLUME", func(c *ControllerInfo) *bool { return &c.SupportsGet }},
}

// nodeCapabilities are the node capabilities the model names.
var nodeCapabilities = []capability[NodeInfo]{
	{"STAGE_UNSTAGE_VOLUME", func(n *NodeInfo) *bool { return &n.RequiresNodeStageVolume }},
	{"GET_VOLUME_STATS", func(n *NodeInfo) *bool { return &n.SupportsStats }},
	{"EXPAND_VOLUME", func(n *NodeInfo) *bool { return &n.SupportsExpand }},
	{"VOLUME_CONDITION", func(n *NodeInfo) *bool { return &n.SupportsCondition }},
}

// capabilityNames returns the names of the capabilities v has, in table order.
func capabilityNames[T any](table []capability[T], v *T) []string {
	var names []string
	for _, c := range table {
		if *c.flag(v) {
			names = append(names, c.name)
		}
	}
	return names
}

// setCapabilities sets the flag of each name in the table; names the model
// does not carry (CSI capabilities it has no field for) are left out.
func setCapabilities[T any](table []capability[T], v *T, names []string) {
	for _, c := range table {
		if slices.Contains(names, c.name) {
			*c.flag(v) = true
		}
	}
}

// InstanceFromFingerprint turns a fingerprint published by the CSI manager
// into the CSIInfo that CSIPlugin.AddPlugin takes: a "csi-controller"
// fingerprint gives ControllerInfo, a "csi-node" one NodeInfo, and the
// plugin ID is the fingerprint's name. The fingerprint's unknown capability
// values are kept in the part it describes. A fingerprint of another type, or
// without a name or alloc ID, is refused with ErrInvalidPlugin.
func InstanceFromFingerprint(fp *messages.CSIFingerprint) (*CSIInfo, error) {
	switch {
	case fp == nil:
		return nil, errorf(ErrInvalidPlugin, "fingerprint is nil")
	case fp.GetName() == "" || fp.GetAllocId() == "":
		return nil, errorf(ErrInvalidPlugin, "fingerprint of type %q has an empty plugin name (%q) or alloc ID (%q)",
			fp.GetType(), fp.GetName(), fp.GetAllocId())
	}
	caps := fp.GetCapabilities()
	info := &CSIInfo{
		PluginID:                 fp.GetName(),
		AllocID:                  fp.GetAllocId(),
		Healthy:                  fp.GetHealthy(),
		HealthDescription:        fp.GetHealthDescription(),
		UpdateTime:               timeFromProto(fp.GetUpdateTime()),
		Provider:                 fp.GetPluginInfo().GetName(),
		ProviderVersion:          fp.GetPluginInfo().GetVendorVersion(),
		RequiresControllerPlugin: slices.Contains(caps.GetPlugin(), "CONTROLLER_SERVICE"),
		RequiresTopologies:       slices.Contains(caps.GetPlugin(), "VOLUME_ACCESSIBILITY_CONSTRAINTS"),
		ReplacedBy:               fp.GetReplacedBy(),
		SocketPath:               fp.GetSocketPath(),
		CapabilitiesUnknown:      caps == nil || fp.GetCapabilitiesFrom() != "",
		CapabilitiesFrom:         fp.GetCapabilitiesFrom(),
	}
	switch fp.GetType() {
	case TypeController:
		info.ControllerInfo = &ControllerInfo{UnknownCapabilities: slices.Clone(caps.GetUnknown())}
		setCapabilities(controllerCapabilities, info.ControllerInfo, caps.GetController())
	case TypeNode:
		node := fp.GetNodeInfo()
		info.NodeInfo = &NodeInfo{
			NodeID:              node.GetNodeId(),
			MaxVolumes:          node.GetMaxVolumes(),
			UnknownCapabilities: slices.Clone(caps.GetUnknown()),
		}
		if len(node.GetAccessibleTopology()) > 0 {
			info.NodeInfo.AccessibleTopology = &Topology{Segments: maps.Clone(node.GetAccessibleTopology())}
		}
		setCapabilities(nodeCapabilities, info.NodeInfo, caps.GetNode())
	default:
		return nil, errorf(ErrInvalidPlugin, "fingerprint of plugin %q (alloc %s) has type %q, want %q or %q",
			fp.GetName(), fp.GetAllocId(), fp.GetType(), TypeController, TypeNode)
	}
	return info, nil
}

// FingerprintCarrying is fp, a fingerprint without capabilities (its
// instance never answered GetPluginCapabilities), with those that rec, the
// record AddPlugin made of it, carries from the node's previous record
// (CSIInfo.carrying), and capabilities_from naming where they come from:
// what a node hands the fleet, so that the fleet keeps the plugin's
// topology requirement as the node's catalog does. fp itself when it has
// capabilities or rec carries none (nil, or of another allocation).
func FingerprintCarrying(fp *messages.CSIFingerprint, rec *CSIInfo) *messages.CSIFingerprint {
	if fp.GetCapabilities() != nil || rec == nil || rec.CapabilitiesFrom == "" || rec.AllocID != fp.GetAllocId() {
		return fp
	}
	caps := &messages.CSICapabilities{}
	if rec.RequiresControllerPlugin {
		caps.Plugin = append(caps.Plugin, "CONTROLLER_SERVICE")
	}
	if rec.RequiresTopologies {
		caps.Plugin = append(caps.Plugin, "VOLUME_ACCESSIBILITY_CONSTRAINTS")
	}
	if c := rec.ControllerInfo; c != nil && fp.GetType() == TypeController {
		caps.Controller, caps.Unknown = capabilityNames(controllerCapabilities, c), slices.Clone(c.UnknownCapabilities)
	}
	if n := rec.NodeInfo; n != nil && fp.GetType() == TypeNode {
		caps.Node, caps.Unknown = capabilityNames(nodeCapabilities, n), slices.Clone(n.UnknownCapabilities)
	}
	out := proto.CloneOf(fp)
	out.Capabilities, out.CapabilitiesFrom = caps, rec.CapabilitiesFrom
	return out
}

func timeToProto(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func timeFromProto(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

func topologyToProto(t *Topology) *messages.CatalogTopology {
	if t == nil {
		return nil
	}
	return &messages.CatalogTopology{Segments: maps.Clone(t.Segments)}
}

func topologyFromProto(m *messages.CatalogTopology) *Topology {
	if m == nil {
		return nil
	}
	return &Topology{Segments: maps.Clone(m.GetSegments())}
}

func topologiesToProto(ts []*Topology) []*messages.CatalogTopology {
	out := make([]*messages.CatalogTopology, 0, len(ts))
	for _, t := range ts {
		if t == nil {
			t = &Topology{} // Validate refuses nil topologies; the wire has no nil
		}
		out = append(out, topologyToProto(t))
	}
	return out
}

func topologiesFromProto(ms []*messages.CatalogTopology) []*Topology {
	if len(ms) == 0 {
		return nil
	}
	out := make([]*Topology, len(ms))
	for i, m := range ms {
		out[i] = topologyFromProto(m)
	}
	return out
}

// mapTo converts each value of m with conv; nil for an empty m.
func mapTo[A, B any](m map[string]A, conv func(A) B) map[string]B {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]B, len(m))
	for k, v := range m {
		out[k] = conv(v)
	}
	return out
}

// ClaimToProto returns c in its protobuf form; empty for nil.
func ClaimToProto(c *Claim) *messages.CatalogClaim {
	if c == nil {
		return &messages.CatalogClaim{}
	}
	return &messages.CatalogClaim{AllocId: c.AllocID, NodeId: c.NodeID, Mode: string(c.Mode), State: string(c.State), LastError: c.LastError,
		AccessMode: string(c.AccessMode), AttachmentMode: string(c.AttachmentMode)}
}

// ClaimFromProto returns the claim m describes.
func ClaimFromProto(m *messages.CatalogClaim) *Claim {
	return &Claim{AllocID: m.GetAllocId(), NodeID: m.GetNodeId(), Mode: ClaimMode(m.GetMode()), State: ClaimState(m.GetState()), LastError: m.GetLastError(),
		AccessMode: AccessMode(m.GetAccessMode()), AttachmentMode: AttachmentMode(m.GetAttachmentMode())}
}

// Proto returns h in its protobuf form.
func (h Health) Proto() *messages.CatalogHealth {
	return &messages.CatalogHealth{
		Schedulable:         h.Schedulable,
		ControllerRequired:  h.ControllerRequired,
		ControllersHealthy:  int64(h.ControllersHealthy),
		ControllersExpected: int64(h.ControllersExpected),
		NodesHealthy:        int64(h.NodesHealthy),
		NodesExpected:       int64(h.NodesExpected),
	}
}

// HealthFromProto returns the Health that m describes; the zero Health for nil.
func HealthFromProto(m *messages.CatalogHealth) Health {
	return Health{
		Schedulable:         m.GetSchedulable(),
		ControllerRequired:  m.GetControllerRequired(),
		ControllersHealthy:  int(m.GetControllersHealthy()),
		ControllersExpected: int(m.GetControllersExpected()),
		NodesHealthy:        int(m.GetNodesHealthy()),
		NodesExpected:       int(m.GetNodesExpected()),
	}
}

// Proto returns v in its protobuf form, sharing nothing with v. A nil
// topology becomes an empty one (Validate refuses both).
func (v *CSIVolume) Proto() *messages.CatalogVolume {
	return &messages.CatalogVolume{
		Id:                v.ID,
		Namespace:         v.Namespace,
		PluginId:          v.PluginID,
		AccessMode:        string(v.AccessMode),
		AttachmentMode:    string(v.AttachmentMode),
		Topologies:        topologiesToProto(v.Topologies),
		ReadClaims:        mapTo(v.ReadClaims, ClaimToProto),
		WriteClaims:       mapTo(v.WriteClaims, ClaimToProto),
		PastClaims:        mapTo(v.PastClaims, ClaimToProto),
		Health:            v.Health.Proto(),
		ResourceExhausted: timeToProto(v.ResourceExhausted),
		CreateIndex:       v.CreateIndex,
		ModifyIndex:       v.ModifyIndex,
		ExternalId:        v.ExternalID,
		CapacityBytes:     v.CapacityBytes,
		Parameters:        maps.Clone(v.Parameters),
		MutableParameters: maps.Clone(v.MutableParameters),
		Secrets:           maps.Clone(v.Secrets),
		Context:           maps.Clone(v.Context),
		MountOptions:      mountOptionsToProto(v.MountOptions),
		// RequestedTopologies are kept apart from Topologies on the wire.
		RequestedTopologies: topologiesToProto(v.RequestedTopologies),
		Deleting:            v.Deleting,
		Created:             v.Created,
		Attachments:         mapTo(v.Attachments, AttachmentToProto),
		Capabilities:        capabilitiesToProto(v.RequestedCapabilities),
	}
}

// VolumeFromProto returns the volume m describes, with non-nil claim maps.
// Modes and claims are taken as spelled: run Validate on the result.
func VolumeFromProto(m *messages.CatalogVolume) *CSIVolume {
	v := &CSIVolume{
		ID:                m.GetId(),
		Namespace:         m.GetNamespace(),
		PluginID:          m.GetPluginId(),
		AccessMode:        AccessMode(m.GetAccessMode()),
		AttachmentMode:    AttachmentMode(m.GetAttachmentMode()),
		Topologies:        topologiesFromProto(m.GetTopologies()),
		ReadClaims:        mapTo(m.GetReadClaims(), ClaimFromProto),
		WriteClaims:       mapTo(m.GetWriteClaims(), ClaimFromProto),
		PastClaims:        mapTo(m.GetPastClaims(), ClaimFromProto),
		Attachments:       mapTo(m.GetAttachments(), AttachmentFromProto),
		Health:            HealthFromProto(m.GetHealth()),
		ResourceExhausted: timeFromProto(m.GetResourceExhausted()),
		CreateIndex:       m.GetCreateIndex(),
		ModifyIndex:       m.GetModifyIndex(),
	}
	pluginSideFromProto(v, m)
	v.RequestedCapabilities = capabilitiesFromProto(m.GetCapabilities())
	v.ensureMaps()
	return v
}

// StubProto returns the list summary of v in its protobuf form: v without
// its claims and secrets, and the numbers of its read and write claims.
func (v *CSIVolume) StubProto() *messages.CatalogVolumeStub {
	m := v.Proto()
	m.ReadClaims, m.WriteClaims, m.PastClaims, m.Attachments, m.Secrets = nil, nil, nil, nil, nil
	return &messages.CatalogVolumeStub{Volume: m, CurrentReaders: int64(len(v.ReadClaims)), CurrentWriters: int64(len(v.WriteClaims))}
}

// VolumeStubFromProto returns the stub m describes.
func VolumeStubFromProto(m *messages.CatalogVolumeStub) *CSIVolumeStub {
	s := VolumeFromProto(m.GetVolume()).Stub()
	s.CurrentReaders, s.CurrentWriters = int(m.GetCurrentReaders()), int(m.GetCurrentWriters())
	return s
}

// Proto returns i in its protobuf form.
func (i *CSIInfo) Proto() *messages.CatalogInstance {
	out := &messages.CatalogInstance{
		PluginId:                 i.PluginID,
		AllocId:                  i.AllocID,
		Healthy:                  i.Healthy,
		HealthDescription:        i.HealthDescription,
		UpdateTime:               timeToProto(i.UpdateTime),
		Provider:                 i.Provider,
		ProviderVersion:          i.ProviderVersion,
		RequiresControllerPlugin: i.RequiresControllerPlugin,
		RequiresTopologies:       i.RequiresTopologies,
		ReplacedBy:               i.ReplacedBy,
		SocketPath:               i.SocketPath,
		CapabilitiesUnknown:      i.CapabilitiesUnknown,
		CapabilitiesFrom:         i.CapabilitiesFrom,
	}
	if c := i.ControllerInfo; c != nil {
		out.ControllerInfo = &messages.CatalogControllerInfo{
			Capabilities: capabilityNames(controllerCapabilities, c),
			Unknown:      slices.Clone(c.UnknownCapabilities),
		}
	}
	if n := i.NodeInfo; n != nil {
		out.NodeInfo = &messages.CatalogNodeInfo{
			NodeId:             n.NodeID,
			MaxVolumes:         n.MaxVolumes,
			AccessibleTopology: topologyToProto(n.AccessibleTopology),
			Capabilities:       capabilityNames(nodeCapabilities, n),
			Unknown:            slices.Clone(n.UnknownCapabilities),
		}
	}
	return out
}

// InstanceFromProto returns the CSIInfo m describes.
func InstanceFromProto(m *messages.CatalogInstance) *CSIInfo {
	info := &CSIInfo{
		PluginID:                 m.GetPluginId(),
		AllocID:                  m.GetAllocId(),
		Healthy:                  m.GetHealthy(),
		HealthDescription:        m.GetHealthDescription(),
		UpdateTime:               timeFromProto(m.GetUpdateTime()),
		Provider:                 m.GetProvider(),
		ProviderVersion:          m.GetProviderVersion(),
		RequiresControllerPlugin: m.GetRequiresControllerPlugin(),
		RequiresTopologies:       m.GetRequiresTopologies(),
		ReplacedBy:               m.GetReplacedBy(),
		SocketPath:               m.GetSocketPath(),
		CapabilitiesUnknown:      m.GetCapabilitiesUnknown(),
		CapabilitiesFrom:         m.GetCapabilitiesFrom(),
	}
	if c := m.GetControllerInfo(); c != nil {
		info.ControllerInfo = &ControllerInfo{UnknownCapabilities: slices.Clone(c.GetUnknown())}
		setCapabilities(controllerCapabilities, info.ControllerInfo, c.GetCapabilities())
	}
	if n := m.GetNodeInfo(); n != nil {
		info.NodeInfo = &NodeInfo{
			NodeID:              n.GetNodeId(),
			MaxVolumes:          n.GetMaxVolumes(),
			AccessibleTopology:  topologyFromProto(n.GetAccessibleTopology()),
			UnknownCapabilities: slices.Clone(n.GetUnknown()),
		}
		setCapabilities(nodeCapabilities, info.NodeInfo, n.GetCapabilities())
	}
	return info
}

// Proto returns p in its protobuf form, with its health counts (and whether a
// volume of p would be schedulable) in health.
func (p *CSIPlugin) Proto() *messages.CatalogPlugin {
	return &messages.CatalogPlugin{
		Id:                 p.ID,
		Provider:           p.Provider,
		Version:            p.Version,
		ControllerRequired: p.ControllerRequired,
		Jobs: mapTo(p.Jobs, func(j PluginJob) *messages.CatalogPluginJob {
			return &messages.CatalogPluginJob{Id: j.ID, Type: string(j.Type), Expected: int64(j.Expected)}
		}),
		Controllers: mapTo(p.Controllers, (*CSIInfo).Proto),
		Nodes:       mapTo(p.Nodes, (*CSIInfo).Proto),
		Health:      PluginHealth(p).Proto(),
		CreateIndex: p.CreateIndex,
		ModifyIndex: p.ModifyIndex,
	}
}

// PluginFromProto returns the plugin m describes. Its health counts are
// recomputed from its instances (m's are ignored), so they are exact by
// construction. An instance that does not fit (another plugin's, an empty
// node ID, a controller entry without controller info or a node entry
// without node info) or a malformed job is refused with ErrInvalidPlugin.
func PluginFromProto(m *messages.CatalogPlugin) (*CSIPlugin, error) {
	p := NewCSIPlugin(m.GetId(), m.GetCreateIndex())
	if p.ID == "" {
		return nil, errorf(ErrInvalidPlugin, "plugin ID must not be empty")
	}
	entries := []struct {
		kind    string
		entries map[string]*messages.CatalogInstance
		hasPart func(*CSIInfo) bool
	}{
		{"controller", m.GetControllers(), func(i *CSIInfo) bool { return i.ControllerInfo != nil }},
		{"node", m.GetNodes(), func(i *CSIInfo) bool { return i.NodeInfo != nil }},
	}
	for _, e := range entries {
		for _, nodeID := range slices.Sorted(maps.Keys(e.entries)) {
			info := InstanceFromProto(e.entries[nodeID])
			if !e.hasPart(info) {
				return nil, p.errorf("%s entry of node %s has no %s info", e.kind, nodeID, e.kind)
			}
			if err := p.AddPlugin(nodeID, info); err != nil {
				return nil, err
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(m.GetJobs())) {
		j := m.GetJobs()[id]
		if j.GetId() != id {
			return nil, p.errorf("job filed under %q is job %q", id, j.GetId())
		}
		if err := p.SetJob(PluginJob{ID: j.GetId(), Type: PluginType(j.GetType()), Expected: int(j.GetExpected())}); err != nil {
			return nil, err
		}
	}
	p.Provider, p.Version, p.ControllerRequired = m.GetProvider(), m.GetVersion(), m.GetControllerRequired()
	p.ModifyIndex = m.GetModifyIndex()
	return p, nil
}
