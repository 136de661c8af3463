package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/messages"
)

// VolumeBody registers a volume: POST /v1/volumes.
type VolumeBody struct {
	ID             string              `json:"id"`
	Namespace      string              `json:"namespace"`
	PluginID       string              `json:"plugin_id"`
	AccessMode     string              `json:"access_mode"`
	AttachmentMode string              `json:"attachment_mode"`
	Topologies     []map[string]string `json:"topologies,omitempty"`
	// Capabilities, when given, are the volume's capabilities (the first is
	// its access and attachment modes, which are then left out).
	Capabilities []CapabilityJSON `json:"capabilities,omitempty"`
}

// VolumeJSON is a volume as the API renders it.
type VolumeJSON struct {
	ID             string              `json:"id"`
	Namespace      string              `json:"namespace"`
	PluginID       string              `json:"plugin_id"`
	AccessMode     string              `json:"access_mode"`
	AttachmentMode string              `json:"attachment_mode"`
	Topologies     []map[string]string `json:"topologies"`
	Capabilities   []CapabilityJSON    `json:"capabilities,omitempty"`
	Schedulable    bool                `json:"schedulable"`
	NodesHealthy   int                 `json:"nodes_healthy"`
	ReadClaims     []string            `json:"read_claims"`
	WriteClaims    []string            `json:"write_claims"`
	CreateIndex    uint64              `json:"create_index"`
	ModifyIndex    uint64              `json:"modify_index"`
	// MutableParameters are those the modifies that succeeded set
	// (ControllerModifyVolume), as the catalog records them; absent
	// before any.
	MutableParameters map[string]string `json:"mutable_parameters,omitempty"`
	// Attachments are the volume's attachments to nodes, as a fleet records
	// them (cluster mode); absent on a single node.
	Attachments []AttachmentJSON `json:"attachments,omitempty"`
}

// AttachmentJSON is a volume's attachment to a node in a fleet.
type AttachmentJSON struct {
	NodeID         string `json:"node_id"`
	ExternalNodeID string `json:"external_node_id"`
	State          string `json:"state"`
}

func volumeJSON(v *model.CSIVolume) VolumeJSON {
	out := VolumeJSON{
		ID: v.ID, Namespace: v.Namespace, PluginID: v.PluginID,
		AccessMode: string(v.AccessMode), AttachmentMode: string(v.AttachmentMode),
		Schedulable: v.Schedulable, NodesHealthy: v.NodesHealthy,
		Topologies: []map[string]string{}, ReadClaims: []string{}, WriteClaims: []string{}, Capabilities: capabilitiesJSON(v),
		CreateIndex: v.CreateIndex, ModifyIndex: v.ModifyIndex, MutableParameters: maps.Clone(v.MutableParameters),
	}
	for _, t := range v.Topologies {
		out.Topologies = append(out.Topologies, t.Segments)
	}
	for alloc := range v.ReadClaims {
		out.ReadClaims = append(out.ReadClaims, alloc)
	}
	for alloc := range v.WriteClaims {
		out.WriteClaims = append(out.WriteClaims, alloc)
	}
	for _, node := range slices.Sorted(maps.Keys(v.Attachments)) {
		a := v.Attachments[node]
		out.Attachments = append(out.Attachments, AttachmentJSON{NodeID: a.NodeID, ExternalNodeID: a.ExternalNodeID, State: string(a.State)})
	}
	return out
}

func (s *Server) volumeRoutes() []route {
	return []route{
		{"POST", "/v1/volumes", nil, s.registerVolume},
		{"POST", "/v1/volumes:batch", nil, s.registerVolumes},
		{"POST", "/v1/volumes:deregister", nil, s.deregisterVolumes},
		{"GET", "/v1/volumes", []string{"namespace", "plugin"}, s.listVolumes},
		{"GET", "/v1/volumes/{namespace}/{id}", nil, s.getVolume},
		{"DELETE", "/v1/volumes/{namespace}/{id}", []string{"deregister_only"}, s.deregisterVolume},
		{"POST", "/v1/volumes/{namespace}/{id}/claim", nil, s.claimVolume},
		{"POST", "/v1/volumes/{namespace}/{id}/release", nil, s.releaseVolume},
		{"POST", "/v1/volumes/{namespace}/{id}/mount", nil, s.mountVolume},
		{"POST", "/v1/volumes/{namespace}/{id}/unmount", nil, s.unmountVolume},
		{"POST", "/v1/volumes/{namespace}/{id}/detach", nil, s.detachVolume},
		{"GET", "/v1/volumes/{namespace}/{id}/status", nil, s.volumeStatus},
	}
}

func (s *Server) needVolumes() error {
	if s.Catalog == nil || s.Volumes == nil {
		return fmt.Errorf("%w: this agent runs no CSI catalog and volume manager", errNotFound)
	}
	return nil
}

func (s *Server) registerVolume(w http.ResponseWriter, r *http.Request) error {
	if err := s.needVolumes(); err != nil {
		return err
	}
	var body VolumeBody
	if err := s.decode(w, r, &body, false); err != nil {
		return err
	}
	v, err := s.volumeFromBody(r.Context(), body)
	if err != nil {
		return err
	}
	got, err := s.Catalog.RegisterVolume(r.Context(), v)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, volumeJSON(got))
	return nil
}

// volumeFromBody is the volume a registration body describes, its
// capabilities checked with the plugin's controller where it can.
func (s *Server) volumeFromBody(ctx context.Context, body VolumeBody) (*model.CSIVolume, error) {
	if err := s.notADockerPlugin(body.PluginID); err != nil {
		return nil, err
	}
	caps, err := bodyCapabilities(body)
	if err != nil {
		return nil, err
	}
	v := model.NewCSIVolume(body.ID, 0)
	v.Namespace, v.PluginID = body.Namespace, body.PluginID
	if len(body.Capabilities) > 0 {
		v.SetCapabilities(caps)
	} else {
		v.AccessMode, v.AttachmentMode = caps[0].AccessMode, caps[0].AttachmentMode
	}
	if v.Namespace == "" {
		v.Namespace = model.DefaultNamespace
	}
	for _, seg := range body.Topologies {
		v.Topologies = append(v.Topologies, &model.Topology{Segments: seg})
	}
	if err := s.Catalog.CheckTopologyRequired(v, false); err != nil {
		return nil, err
	}
	if err := s.validateCapabilities(ctx, v); err != nil {
		return nil, err
	}
	return v, nil
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) error {
	if err := s.needVolumes(); err != nil {
		return err
	}
	stubs, err := s.Catalog.ListPluginVolumes(r.Context(), r.URL.Query().Get("namespace"), r.URL.Query().Get("plugin"))
	if err != nil {
		return err
	}
	out := make([]VolumeStubJSON, 0, len(stubs))
	for _, v := range stubs {
		out = append(out, volumeStubJSON(v))
	}
	writeJSON(w, http.StatusOK, map[string]any{"volumes": out})
	return nil
}

// VolumeStubJSON is a volume as GET /v1/volumes lists it.
type VolumeStubJSON struct {
	ID             string              `json:"id"`
	Namespace      string              `json:"namespace"`
	PluginID       string              `json:"plugin_id"`
	AccessMode     string              `json:"access_mode"`
	AttachmentMode string              `json:"attachment_mode"`
	Topologies     []map[string]string `json:"topologies"`
	CurrentReaders int                 `json:"current_readers"`
	CurrentWriters int                 `json:"current_writers"`
	Schedulable    bool                `json:"schedulable"`
	NodesHealthy   int                 `json:"nodes_healthy"`
	// ResourceExhausted is RFC 3339, absent when the plugin never said so.
	ResourceExhausted *time.Time `json:"resource_exhausted,omitempty"`
	CreateIndex       uint64     `json:"create_index"`
	ModifyIndex       uint64     `json:"modify_index"`
}

func volumeStubJSON(v *model.CSIVolumeStub) VolumeStubJSON {
	out := VolumeStubJSON{
		ID: v.ID, Namespace: v.Namespace, PluginID: v.PluginID,
		AccessMode: string(v.AccessMode), AttachmentMode: string(v.AttachmentMode),
		Topologies:     []map[string]string{},
		CurrentReaders: v.CurrentReaders, CurrentWriters: v.CurrentWriters,
		Schedulable: v.Schedulable, NodesHealthy: v.NodesHealthy,
		CreateIndex: v.CreateIndex, ModifyIndex: v.ModifyIndex,
	}
	for _, t := range v.Topologies {
		out.Topologies = append(out.Topologies, t.Segments)
	}
	if !v.ResourceExhausted.IsZero() {
		at := v.ResourceExhausted
		out.ResourceExhausted = &at
	}
	return out
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request) error {
	if err := s.needVolumes(); err != nil {
		return err
	}
	v, err := s.Catalog.GetVolume(r.Context(), r.PathValue("namespace"), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, volumeJSON(v))
	return nil
}

func (s *Server) deregisterVolume(w http.ResponseWriter, r *http.Request) error {
	if err := s.needVolumes(); err != nil {
		return err
	}
	if done, err := s.deleteThroughController(w, r); done {
		return err
	}
	ns, id := r.PathValue("namespace"), r.PathValue("id")
	if err := s.Catalog.DeregisterVolume(r.Context(), ns, id); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"deregistered": id, "namespace": ns})
	return nil
}

// AllocBody names the alloc of a claim, release, mount or unmount:
// POST /v1/volumes/{ns}/{id}/claim, .../release, .../mount, .../unmount.
// read_only is for claim and mount only; force for unmount only (an
// operator's last resort: see volumes.Manager.ForceUnmount).
type AllocBody struct {
	AllocID  string `json:"alloc_id"`
	ReadOnly bool   `json:"read_only"`
	Force    bool   `json:"force,omitempty"`
	// AccessMode and AttachmentMode choose the volume's capability a claim
	// or a mount uses; either may be left out when one capability fits.
	AccessMode     string `json:"access_mode,omitempty"`
	AttachmentMode string `json:"attachment_mode,omitempty"`
	// MountGroup is a mount's GID in decimal, as a string (CSI
	// volume_mount_group): the node plugin must advertise
	// VOLUME_MOUNT_GROUP.
	MountGroup string `json:"mount_group,omitempty"`
}

// DetachBody names the plugin's node to detach a volume from:
// POST /v1/volumes/{ns}/{id}/detach.
type DetachBody struct {
	NodeID string `json:"node_id"`
}

// MountJSON is the answer to a mount.
type MountJSON struct {
	TargetPath  string `json:"target_path"`
	StagingPath string `json:"staging_path"`
	IsDevice    bool   `json:"is_device"`
}

// StatusJSON is GET /v1/volumes/{ns}/{id}/status: the catalog's volume
// (absent when it is not registered), its past claims, and what this node
// holds of it.
type StatusJSON struct {
	Volume        *VolumeJSON     `json:"volume,omitempty"`
	PastClaims    []PastClaimJSON `json:"past_claims"`
	Node          json.RawMessage `json:"node"`
	Busy          bool            `json:"busy"`
	LastOperation string          `json:"last_operation,omitempty"`
	LastError     string          `json:"last_error,omitempty"`
	Orphans       []string        `json:"orphans"`
	// Stats is the node plugin's NodeGetVolumeStats answer while the
	// volume is published here and the plugin advertises GET_VOLUME_STATS.
	Stats *StatsJSON `json:"stats,omitempty"`
	// StatsError says why stats is absent although the volume is published.
	StatsError string `json:"stats_error,omitempty"`
}

// StatsJSON is a published volume's usage and condition, as its node
// plugin reports them.
type StatsJSON struct {
	VolumePath string         `json:"volume_path"`
	Usage      []UsageJSON    `json:"usage"`
	Condition  *ConditionJSON `json:"condition,omitempty"`
}

// UsageJSON is the usage of one unit: "bytes" or "inodes".
type UsageJSON struct {
	Unit      string `json:"unit"`
	Available int64  `json:"available"`
	Total     int64  `json:"total"`
	Used      int64  `json:"used"`
}

// ConditionJSON is a volume's health as its node plugin sees it.
type ConditionJSON struct {
	Abnormal bool   `json:"abnormal"`
	Message  string `json:"message"`
}

// statsJSON is the JSON of stats; nil stays nil.
func statsJSON(stats *messages.VolumeStats) *StatsJSON {
	if stats == nil {
		return nil
	}
	out := &StatsJSON{VolumePath: stats.GetVolumePath(), Usage: []UsageJSON{}}
	for _, u := range stats.GetUsage() {
		out.Usage = append(out.Usage, UsageJSON{Unit: u.GetUnit(), Available: u.GetAvailable(), Total: u.GetTotal(), Used: u.GetUsed()})
	}
	if c := stats.GetCondition(); c != nil {
		out.Condition = &ConditionJSON{Abnormal: c.GetAbnormal(), Message: c.GetMessage()}
	}
	return out
}

// PastClaimJSON is a claim being released, with how far it has come.
type PastClaimJSON struct {
	AllocID string `json:"alloc_id"`
	Mode    string `json:"mode"`
	State   string `json:"state"`
	// LastError says why the release is stuck in State; the GC step
	// retries it.
	LastError string `json:"last_error"`
}

// allocRequest decodes the AllocBody of op ("a claim", "a release", "a
// mount", "an unmount") and checks the alloc is named and that the body
// holds nothing op does not take.
func (s *Server) allocRequest(w http.ResponseWriter, r *http.Request, op string) (AllocBody, error) {
	var body AllocBody
	if err := s.needVolumes(); err != nil {
		return body, err
	}
	if err := s.decode(w, r, &body, false); err != nil {
		return body, err
	}
	switch {
	case body.AllocID == "":
		return body, fmt.Errorf("%w: alloc_id is required", errBadBody)
	case body.ReadOnly && op != "a claim" && op != "a mount":
		return body, fmt.Errorf("%w: read_only means nothing to %s; leave it out", errBadBody, op)
	case body.Force && op != "an unmount":
		return body, fmt.Errorf("%w: force is for an unmount only; leave it out of %s", errBadBody, op)
	case (body.AccessMode != "" || body.AttachmentMode != "") && op != "a claim" && op != "a mount":
		return body, fmt.Errorf("%w: access_mode and attachment_mode choose a claim's capability; leave them out of %s", errBadBody, op)
	case body.MountGroup != "" && op != "a mount":
		return body, fmt.Errorf("%w: mount_group is for a mount only; leave it out of %s", errBadBody, op)
	case volumes.CheckMountGroup(body.MountGroup) != nil:
		return body, fmt.Errorf("%w: mount_group %q is not a GID: give a decimal number from 0 to %d, as a string", errBadBody, body.MountGroup, uint64(volumes.MaxMountGroup))
	}
	return body, nil
}

func (s *Server) claimVolume(w http.ResponseWriter, r *http.Request) error {
	body, err := s.allocRequest(w, r, "a claim")
	if err != nil {
		return err
	}
	use, err := bodyUsage(body)
	if err != nil {
		return err
	}
	v, err := s.Volumes.ClaimVolume(r.Context(), r.PathValue("namespace"), r.PathValue("id"), body.AllocID, use)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, volumeJSON(v))
	return nil
}

func (s *Server) releaseVolume(w http.ResponseWriter, r *http.Request) error {
	body, err := s.allocRequest(w, r, "a release")
	if err != nil {
		return err
	}
	v, err := s.Volumes.ReleaseVolume(r.Context(), r.PathValue("namespace"), r.PathValue("id"), body.AllocID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, volumeJSON(v))
	return nil
}

func (s *Server) mountVolume(w http.ResponseWriter, r *http.Request) error {
	body, err := s.allocRequest(w, r, "a mount")
	if err != nil {
		return err
	}
	use, err := bodyUsage(body)
	if err != nil {
		return err
	}
	res, err := s.Volumes.MountWithGroup(r.Context(), r.PathValue("namespace"), r.PathValue("id"), body.AllocID, use, body.MountGroup)
	s.observeMount("mount", err)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, MountJSON{TargetPath: res.TargetPath, StagingPath: res.StagingPath, IsDevice: res.IsDevice})
	return nil
}

func (s *Server) unmountVolume(w http.ResponseWriter, r *http.Request) error {
	body, err := s.allocRequest(w, r, "an unmount")
	if err != nil {
		return err
	}
	ns, id := r.PathValue("namespace"), r.PathValue("id")
	unmount := s.Volumes.Unmount
	if body.Force {
		unmount = s.Volumes.ForceUnmount
	}
	err = unmount(r.Context(), ns, id, body.AllocID)
	s.observeMount("unmount", err)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"unmounted": id, "namespace": ns, "alloc_id": body.AllocID})
	return nil
}

func (s *Server) detachVolume(w http.ResponseWriter, r *http.Request) error {
	if err := s.needVolumes(); err != nil {
		return err
	}
	var body DetachBody
	if err := s.decode(w, r, &body, false); err != nil {
		return err
	}
	if body.NodeID == "" {
		return fmt.Errorf("%w: node_id is required", errBadBody)
	}
	ns, id := r.PathValue("namespace"), r.PathValue("id")
	if err := s.Volumes.Detach(r.Context(), ns, id, body.NodeID); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"detached": id, "namespace": ns, "node_id": body.NodeID})
	return nil
}

func (s *Server) volumeStatus(w http.ResponseWriter, r *http.Request) error {
	if err := s.needVolumes(); err != nil {
		return err
	}
	ns, id := r.PathValue("namespace"), r.PathValue("id")
	st, err := s.Volumes.Status(r.Context(), ns, id)
	if err != nil {
		return err
	}
	out := StatusJSON{
		PastClaims: []PastClaimJSON{}, Node: json.RawMessage(`null`), Busy: st.Busy,
		LastOperation: st.LastOperation, LastError: st.LastError, Orphans: append([]string{}, st.Orphans...),
		Stats: statsJSON(st.Stats), StatsError: st.StatsError,
	}
	if st.Record != nil {
		out.Node = protoJSON(st.Record)
	}
	v, err := s.Catalog.GetVolume(r.Context(), ns, id)
	switch {
	case err == nil:
		vj := volumeJSON(v)
		out.Volume = &vj
		for _, alloc := range slices.Sorted(maps.Keys(v.PastClaims)) {
			c := v.PastClaims[alloc]
			out.PastClaims = append(out.PastClaims, PastClaimJSON{AllocID: alloc, Mode: string(c.Mode), State: string(c.State), LastError: c.LastError})
		}
	case !errors.Is(err, model.ErrVolumeNotFound) || st.Record == nil:
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) observeMount(op string, err error) {
	if s.OnMount != nil {
		s.OnMount(op, err)
	}
}

// classStatuses is the API's one error table: the HTTP status of each
// error class (errclass). A plugin's answer is never a 500: a plugin that
// failed in itself is 502 (bad gateway), as the agent worked and its
// upstream did not. An error of no class is a 500.
var classStatuses = []struct {
	class  *errclass.Class
	status int
}{
	{errclass.Invalid, http.StatusBadRequest},
	{errclass.Denied, http.StatusForbidden},
	{errclass.NotFound, http.StatusNotFound},
	{errclass.Conflict, http.StatusConflict},
	{errclass.Limit, http.StatusTooManyRequests},
	{errclass.Store, http.StatusInternalServerError},
	{errclass.Corrupt, http.StatusInternalServerError},
	{errclass.Unsupported, http.StatusNotImplemented},
	{errclass.Upstream, http.StatusBadGateway},
	{errclass.Unavailable, http.StatusServiceUnavailable},
	{errclass.ShutDown, http.StatusServiceUnavailable},
	{errclass.Deadline, http.StatusGatewayTimeout},
	{errclass.Exhausted, http.StatusInsufficientStorage},
}

// classStatus is the status of err's class, or 0 when it has none.
func classStatus(err error) int {
	class := errclass.Of(err)
	for _, c := range classStatuses {
		if c.class == class {
			return c.status
		}
	}
	return 0
}
