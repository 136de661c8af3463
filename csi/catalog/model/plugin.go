package model

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/plugvisor/plugvisor/names"
)

// The plugin types of a CSI plugin in the registry, one for each of its
// services. A monolith plugin registers under both. A fingerprint carries
// the type of the service it describes. These are the only definitions of
// the two names: package csi names them again as csi.TypeController and
// csi.TypeNode.
const (
	TypeController = "csi-controller"
	TypeNode       = "csi-node"
)

// ControllerInfo is the fingerprint of a CSI controller plugin: what its
// controller service can do.
type ControllerInfo struct {
	// SupportsCreateDelete is CREATE_DELETE_VOLUME.
	SupportsCreateDelete bool
	// SupportsAttachDetach is PUBLISH_UNPUBLISH_VOLUME: volumes must be
	// attached by the controller before nodes use them.
	SupportsAttachDetach bool
	// SupportsListVolumes is LIST_VOLUMES.
	SupportsListVolumes bool
	// SupportsGetCapacity is GET_CAPACITY.
	SupportsGetCapacity bool
	// SupportsCreateDeleteSnapshot is CREATE_DELETE_SNAPSHOT.
	SupportsCreateDeleteSnapshot bool
	// SupportsListSnapshots is LIST_SNAPSHOTS.
	SupportsListSnapshots bool
	// SupportsClone is CLONE_VOLUME.
	SupportsClone bool
	// SupportsReadOnlyAttach is PUBLISH_READONLY.
	SupportsReadOnlyAttach bool
	// SupportsExpand is EXPAND_VOLUME.
	SupportsExpand bool
	// SupportsListVolumesPublishedNodes is LIST_VOLUMES_PUBLISHED_NODES.
	SupportsListVolumesPublishedNodes bool
	// SupportsCondition is VOLUME_CONDITION.
	SupportsCondition bool
	// SupportsGet is GET_VOLUME.
	SupportsGet bool
	// UnknownCapabilities keeps the raw values of capabilities this model
	// does not name (older or newer CSI specs): kept, never refused.
	UnknownCapabilities []int32
}

// Copy returns a copy of c that shares nothing with it; nil for nil.
func (c *ControllerInfo) Copy() *ControllerInfo {
	if c == nil {
		return nil
	}
	out := *c
	out.UnknownCapabilities = slices.Clone(c.UnknownCapabilities)
	return &out
}

// NodeInfo is the fingerprint of a CSI node plugin: the node as the plugin
// knows it and what its node service can do.
type NodeInfo struct {
	// NodeID is the plugin's own ID for the node (NodeGetInfo's node_id).
	NodeID string
	// MaxVolumes is how many volumes the plugin can publish on the node; 0
	// means no limit.
	MaxVolumes int64
	// AccessibleTopology is where the node stands, if the plugin says.
	AccessibleTopology *Topology
	// RequiresNodeStageVolume is STAGE_UNSTAGE_VOLUME.
	RequiresNodeStageVolume bool
	// SupportsStats is GET_VOLUME_STATS.
	SupportsStats bool
	// SupportsExpand is EXPAND_VOLUME.
	SupportsExpand bool
	// SupportsCondition is VOLUME_CONDITION.
	SupportsCondition bool
	// UnknownCapabilities keeps the raw values of capabilities this model
	// does not name (older or newer CSI specs): kept, never refused.
	UnknownCapabilities []int32
}

// Copy returns a copy of n that shares nothing with it; nil for nil.
func (n *NodeInfo) Copy() *NodeInfo {
	if n == nil {
		return nil
	}
	out := *n
	out.AccessibleTopology = n.AccessibleTopology.Copy()
	out.UnknownCapabilities = slices.Clone(n.UnknownCapabilities)
	return &out
}

// CSIInfo is one fingerprint of a running plugin instance on one node. A
// controller fingerprint has ControllerInfo, a node fingerprint NodeInfo, a
// monolith's both.
type CSIInfo struct {
	// PluginID is the plugin the instance belongs to.
	PluginID string
	// AllocID is the allocation running the instance: its identity.
	AllocID string
	// Healthy is the instance's health at UpdateTime.
	Healthy bool
	// HealthDescription says why the instance is (un)healthy.
	HealthDescription string
	// UpdateTime is when the fingerprint was taken.
	UpdateTime time.Time
	// Provider is the vendor name the plugin reports.
	Provider string
	// ProviderVersion is the vendor version the plugin reports.
	ProviderVersion string
	// RequiresControllerPlugin is true when the plugin needs a controller to
	// publish volumes.
	RequiresControllerPlugin bool
	// RequiresTopologies is true when the plugin's volumes are confined to
	// topologies.
	RequiresTopologies bool
	// ControllerInfo is the controller service's fingerprint, if it runs.
	ControllerInfo *ControllerInfo
	// NodeInfo is the node service's fingerprint, if it runs.
	NodeInfo *NodeInfo
	// ReplacedBy is, on the final fingerprint of an instance that another
	// instance took over, the allocation that one serves (the CSI manager's
	// word, which may be AllocID: the same allocation at a new socket);
	// empty otherwise.
	ReplacedBy string
	// SocketPath is the socket the instance serves the plugin on: what
	// tells two instances of one allocation apart. Empty when unknown.
	SocketPath string
	// CapabilitiesUnknown is true when the instance has not answered
	// GetPluginCapabilities (its fingerprint had no capabilities): what
	// RequiresControllerPlugin, RequiresTopologies and the capability flags
	// of ControllerInfo and NodeInfo say is then carried from the node's
	// previous record of the plugin service (CapabilitiesFrom), if any, by
	// AddPlugin.
	CapabilitiesUnknown bool
	// CapabilitiesFrom is, when CapabilitiesUnknown, the allocation whose
	// record the capabilities were carried from; empty when none was.
	CapabilitiesFrom string
}

// StoppedDescription is the health description of the final fingerprint
// an instance reports when it stops (csi.StoppedDescription is this one).
const StoppedDescription = "plugin instance stopped"

// Stopped reports whether i is the final fingerprint of an instance that
// stopped: unhealthy, with StoppedDescription. False for nil.
func (i *CSIInfo) Stopped() bool {
	return i != nil && !i.Healthy && i.HealthDescription == StoppedDescription
}

// Copy returns a copy of i that shares nothing with it; nil for nil.
func (i *CSIInfo) Copy() *CSIInfo {
	if i == nil {
		return nil
	}
	out := *i
	out.ControllerInfo = i.ControllerInfo.Copy()
	out.NodeInfo = i.NodeInfo.Copy()
	return &out
}

// carrying is i, when its capabilities are unknown (the instance never
// answered GetPluginCapabilities), with those of prev, the node's previous
// record of the same plugin service, marked as carried from prev's
// allocation (CapabilitiesFrom): an instance that cannot be reached yet
// must not make the plugin stop requiring a topology, nor forget what it
// can do, until it says so itself. The node's facts (node ID, topology,
// volume limit) are not carried: they are the new instance's to learn. i
// itself when there is nothing to carry: its capabilities are known, or
// prev knows none (knowsCapabilities).
func (i *CSIInfo) carrying(prev *CSIInfo) *CSIInfo {
	if !i.CapabilitiesUnknown || !prev.knowsCapabilities() {
		return i
	}
	out := i.Copy()
	out.RequiresControllerPlugin, out.RequiresTopologies = prev.RequiresControllerPlugin, prev.RequiresTopologies
	out.CapabilitiesFrom = cmp.Or(prev.CapabilitiesFrom, prev.AllocID)
	if out.ControllerInfo != nil && prev.ControllerInfo != nil {
		out.ControllerInfo = prev.ControllerInfo.Copy()
	}
	if n, was := out.NodeInfo, prev.NodeInfo; n != nil && was != nil {
		n.RequiresNodeStageVolume, n.SupportsStats, n.SupportsExpand, n.SupportsCondition =
			was.RequiresNodeStageVolume, was.SupportsStats, was.SupportsExpand, was.SupportsCondition
		n.UnknownCapabilities = slices.Clone(was.UnknownCapabilities)
	}
	return out
}

// knowsCapabilities reports whether i has capabilities to carry: its
// instance answered GetPluginCapabilities, or i carries another's. False for
// nil.
func (i *CSIInfo) knowsCapabilities() bool {
	return i != nil && (!i.CapabilitiesUnknown || i.CapabilitiesFrom != "")
}

// PluginJob is a job that runs instances of a plugin, and how many it
// expects to run; the expected counts of a plugin are the sums over its jobs.
type PluginJob struct {
	// ID identifies the job among the plugin's jobs.
	ID string
	// Type says which services the job's instances run.
	Type PluginType
	// Expected is how many instances the job runs.
	Expected int
}

// CSIPlugin is a CSI plugin known to the catalog: its fingerprints by node,
// the jobs that run it, and the health counts derived from both.
type CSIPlugin struct {
	// ID is the plugin's ID.
	ID string
	// Provider is the vendor name from the latest fingerprint that had one.
	Provider string
	// Version is the vendor version from the latest fingerprint that had a
	// provider.
	Version string
	// ControllerRequired follows the latest fingerprint: true when the plugin
	// needs a controller to publish volumes.
	ControllerRequired bool

	// Jobs maps a job ID to the job.
	Jobs map[string]PluginJob
	// Controllers maps a node ID to the controller fingerprint on that node.
	Controllers map[string]*CSIInfo
	// Nodes maps a node ID to the node fingerprint on that node.
	Nodes map[string]*CSIInfo

	// ControllersHealthy counts the healthy entries of Controllers.
	ControllersHealthy int
	// ControllersExpected sums Expected over the jobs that run controllers.
	ControllersExpected int
	// NodesHealthy counts the healthy entries of Nodes.
	NodesHealthy int
	// NodesExpected sums Expected over the jobs that run node plugins.
	NodesExpected int

	// CreateIndex is the catalog index at which the plugin first appeared.
	CreateIndex uint64
	// ModifyIndex is the catalog index at which the plugin last changed.
	ModifyIndex uint64
}

// NewCSIPlugin returns a plugin with the given ID and index and empty maps.
func NewCSIPlugin(id string, index uint64) *CSIPlugin {
	p := &CSIPlugin{ID: id, CreateIndex: index, ModifyIndex: index}
	p.ensureMaps()
	return p
}

// ensureMaps makes the plugin's maps before a write to them.
// TopologyRequired reports whether an instance of p, controller or node,
// advertises VOLUME_ACCESSIBILITY_CONSTRAINTS (CSIInfo.RequiresTopologies):
// then every volume of p needs a topology. False for nil.
func (p *CSIPlugin) TopologyRequired() bool {
	if p == nil {
		return false
	}
	for _, entries := range []map[string]*CSIInfo{p.Controllers, p.Nodes} {
		for _, info := range entries {
			if info.RequiresTopologies {
				return true
			}
		}
	}
	return false
}

func (p *CSIPlugin) ensureMaps() {
	if p.Jobs == nil {
		p.Jobs = map[string]PluginJob{}
	}
	for _, m := range []*map[string]*CSIInfo{&p.Controllers, &p.Nodes} {
		if *m == nil {
			*m = map[string]*CSIInfo{}
		}
	}
}

// Copy returns a deep copy of p that shares no map, slice or pointer with it
// (a nil map stays nil); nil for nil.
func (p *CSIPlugin) Copy() *CSIPlugin {
	if p == nil {
		return nil
	}
	out := *p
	out.Jobs = maps.Clone(p.Jobs)
	out.Controllers = copyMap(p.Controllers, (*CSIInfo).Copy)
	out.Nodes = copyMap(p.Nodes, (*CSIInfo).Copy)
	return &out
}

// AddPlugin records info, a fingerprint of p taken on nodeID: its controller
// part (if any) replaces the node's entry in Controllers, its node part (if
// any) the node's entry in Nodes, and the healthy counts move by the
// difference between the old entry and the new. A fingerprint whose
// capabilities are unknown keeps those of the record it replaces
// (CSIPlugin.replaced, CSIInfo.carrying), above all the topology
// requirement. p keeps its own copy of info.
// It refuses (ErrInvalidPlugin, nothing changed) an empty node ID, a nil
// fingerprint, a fingerprint of another plugin or without an alloc, and one
// with neither a controller nor a node part.
func (p *CSIPlugin) AddPlugin(nodeID string, info *CSIInfo) error {
	if err := p.checkFingerprint(nodeID, info); err != nil {
		return err
	}
	p.ensureMaps()
	info = info.carrying(p.replaced(nodeID, info))
	if info.ControllerInfo != nil {
		p.ControllersHealthy += replaceEntry(p.Controllers, nodeID, info.Copy())
	}
	if info.NodeInfo != nil {
		p.NodesHealthy += replaceEntry(p.Nodes, nodeID, info.Copy())
	}
	p.ControllerRequired = info.RequiresControllerPlugin
	if info.Provider != "" {
		p.Provider, p.Version = info.Provider, info.ProviderVersion
	}
	return nil
}

// replaced is the one record of nodeID that info, about to replace it,
// carries capabilities from (CSIInfo.carrying): the node's entry when info
// has a node part and that entry knows capabilities, else the controller's
// entry when info has a controller part and that one does; nil when neither.
// A monolith's fingerprint so carries once, from one allocation, into both
// its entries; where a controller and a node of two allocations shared the
// node, the controller's part is not carried.
func (p *CSIPlugin) replaced(nodeID string, info *CSIInfo) *CSIInfo {
	if node := p.Nodes[nodeID]; info.NodeInfo != nil && node.knowsCapabilities() {
		return node
	}
	if controller := p.Controllers[nodeID]; info.ControllerInfo != nil && controller.knowsCapabilities() {
		return controller
	}
	return nil
}

// DeleteNode removes both fingerprints of nodeID, counting out the healthy
// ones, and reports whether there was any.
func (p *CSIPlugin) DeleteNode(nodeID string) bool {
	return p.deleteEntries(nodeID, func(*CSIInfo) bool { return true })
}

// DeleteAlloc removes the fingerprints of nodeID that allocID made, counting
// out the healthy ones, and reports whether there was any. A fingerprint a
// newer alloc made on the node stays.
func (p *CSIPlugin) DeleteAlloc(nodeID, allocID string) bool {
	return p.deleteEntries(nodeID, func(i *CSIInfo) bool { return i != nil && i.AllocID == allocID })
}

// deleteEntries removes the fingerprints of nodeID that match, keeping the
// healthy counts, and reports whether it removed any.
func (p *CSIPlugin) deleteEntries(nodeID string, match func(*CSIInfo) bool) bool {
	c, cOK := removeEntry(p.Controllers, nodeID, match)
	n, nOK := removeEntry(p.Nodes, nodeID, match)
	p.ControllersHealthy += c
	p.NodesHealthy += n
	return cOK || nOK
}

// replaceEntry puts info under nodeID in m and returns by how much the
// number of healthy entries of m changed.
func replaceEntry(m map[string]*CSIInfo, nodeID string, info *CSIInfo) int {
	delta := healthy(info) - healthy(m[nodeID])
	m[nodeID] = info
	return delta
}

// removeEntry removes the entry of nodeID from m if it matches, and returns
// by how much the number of healthy entries of m changed and whether it
// removed the entry.
func removeEntry(m map[string]*CSIInfo, nodeID string, match func(*CSIInfo) bool) (int, bool) {
	prev, ok := m[nodeID]
	if !ok || !match(prev) {
		return 0, false
	}
	delete(m, nodeID)
	return -healthy(prev), true
}

// healthy is 1 for a healthy fingerprint and 0 for an unhealthy or nil one.
func healthy(info *CSIInfo) int {
	if info != nil && info.Healthy {
		return 1
	}
	return 0
}

// checkFingerprint says what is wrong with info as a fingerprint of p taken
// on nodeID, or nil.
func (p *CSIPlugin) checkFingerprint(nodeID string, info *CSIInfo) error {
	switch {
	case p.ID == "":
		return errorf(ErrInvalidPlugin, "plugin with an empty ID cannot take fingerprints")
	case nodeID == "":
		return p.errorf("fingerprint has an empty node ID")
	case info == nil:
		return p.errorf("fingerprint from node %s is nil", nodeID)
	case info.PluginID != p.ID:
		return p.errorf("fingerprint from node %s is for plugin %q", nodeID, info.PluginID)
	case info.AllocID == "":
		return p.errorf("fingerprint from node %s has an empty alloc ID", nodeID)
	case info.ControllerInfo == nil && info.NodeInfo == nil:
		return p.errorf("fingerprint from node %s (alloc %s) has neither controller nor node info", nodeID, info.AllocID)
	}
	for _, err := range []error{names.Check("plugin ID", p.ID), names.Check("node ID", nodeID), names.Check("alloc ID", info.AllocID)} {
		if err != nil {
			return p.errorf("fingerprint: %v", err)
		}
	}
	return nil
}

// SetJob adds job to p's jobs or replaces the job with its ID, and updates
// the expected counts. It refuses (ErrInvalidPlugin, nothing changed) an
// empty job ID, an unknown plugin type and a negative expected count.
func (p *CSIPlugin) SetJob(job PluginJob) error {
	switch {
	case job.ID == "":
		return p.errorf("job has an empty ID")
	case job.Expected < 0:
		return p.errorf("job %s expects %d instances", job.ID, job.Expected)
	}
	if err := job.Type.check(); err != nil {
		return within(err, ErrInvalidPlugin, "plugin %q: job %s", p.ID, job.ID)
	}
	p.ensureMaps()
	p.Jobs[job.ID] = job
	p.countExpected()
	return nil
}

// DeleteJob removes the job with the given ID, updates the expected counts,
// and reports whether there was such a job.
func (p *CSIPlugin) DeleteJob(jobID string) bool {
	if _, ok := p.Jobs[jobID]; !ok {
		return false
	}
	delete(p.Jobs, jobID)
	p.countExpected()
	return true
}

// countExpected sets the expected counts from the jobs.
func (p *CSIPlugin) countExpected() {
	p.ControllersExpected, p.NodesExpected = 0, 0
	for _, j := range p.Jobs {
		if j.Type.runsController() {
			p.ControllersExpected += j.Expected
		}
		if j.Type.runsNode() {
			p.NodesExpected += j.Expected
		}
	}
}

// IsEmpty reports whether p has no fingerprints and no jobs, so that the
// catalog can forget it; a nil plugin is empty.
func (p *CSIPlugin) IsEmpty() bool {
	return p == nil || len(p.Controllers) == 0 && len(p.Nodes) == 0 && len(p.Jobs) == 0
}

// errorf returns an error about p matching ErrInvalidPlugin.
func (p *CSIPlugin) errorf(format string, args ...any) error {
	return errorf(ErrInvalidPlugin, "plugin %q: "+format, append([]any{p.ID}, args...)...)
}

// CSIPluginStub is the summary of a plugin shown in lists. Its fields are
// the plugin's fields of the same names.
type CSIPluginStub struct {
	ID, Provider, Version                   string
	ControllerRequired                      bool
	ControllersHealthy, ControllersExpected int
	NodesHealthy, NodesExpected             int
	CreateIndex, ModifyIndex                uint64
}

// Stub returns the list summary of p.
func (p *CSIPlugin) Stub() *CSIPluginStub {
	return &CSIPluginStub{
		ID:                  p.ID,
		Provider:            p.Provider,
		Version:             p.Version,
		ControllerRequired:  p.ControllerRequired,
		ControllersHealthy:  p.ControllersHealthy,
		ControllersExpected: p.ControllersExpected,
		NodesHealthy:        p.NodesHealthy,
		NodesExpected:       p.NodesExpected,
		CreateIndex:         p.CreateIndex,
		ModifyIndex:         p.ModifyIndex,
	}
}
