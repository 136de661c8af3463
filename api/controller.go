package api

import (
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/controller"
)

// This file serves the controller operations: create, expand and delete a
// volume through its plugin's controller, and snapshots.
//
//	POST   /v1/volumes/{namespace}/{id}/create   CreateBody → ManagedVolumeJSON (201)
//	POST   /v1/volumes/{namespace}/{id}/expand   ExpandBody → ExpandJSON
//	DELETE /v1/volumes/{namespace}/{id}          a created volume is deleted on the plugin;
//	                                             a registered one (or ?deregister_only=true) is only forgotten
//	POST   /v1/snapshots                         SnapshotBody → SnapshotJSON (201)
//	GET    /v1/snapshots?plugin_id=&namespace=&volume_id=&snapshot_id=  → {"snapshots": [...]}
//	DELETE /v1/snapshots/{plugin_id}/{snapshot_id}  optional {"secrets": {...}}
//
// Bodies are decoded strictly: an unknown field, a value of the wrong type
// or data after the JSON object is refused with 400 naming the field.
// Secrets go in and never come out: a volume shows the keys of its secrets
// only. A plugin's gRPC answer maps to its own status (see pluginStatus),
// never 500.

// CapacityJSON is a capacity range in bytes; zero means unset.
type CapacityJSON struct {
	RequiredBytes int64 `json:"required_bytes,omitempty"`
	LimitBytes    int64 `json:"limit_bytes,omitempty"`
}

// MountOptionsJSON are a file-system volume's fs type and mount flags.
type MountOptionsJSON struct {
	FSType     string   `json:"fs_type,omitempty"`
	MountFlags []string `json:"mount_flags"`
}

// TopologyJSON are the accessibility requirements of a create.
type TopologyJSON struct {
	Requisite []map[string]string `json:"requisite,omitempty"`
	Preferred []map[string]string `json:"preferred,omitempty"`
}

// CreateBody creates a volume: POST /v1/volumes/{namespace}/{id}/create.
// name defaults to the volume's ID, attachment_mode to "file-system".
type CreateBody struct {
	PluginID       string            `json:"plugin_id"`
	Name           string            `json:"name,omitempty"`
	Capacity       CapacityJSON      `json:"capacity"`
	Parameters     map[string]string `json:"parameters,omitempty"`
	Secrets        map[string]string `json:"secrets,omitempty"`
	AccessMode     string            `json:"access_mode"`
	AttachmentMode string            `json:"attachment_mode,omitempty"`
	MountOptions   *MountOptionsJSON `json:"mount_options,omitempty"`
	Topology       TopologyJSON      `json:"topology"`
	SnapshotID     string            `json:"snapshot_id,omitempty"`
	CloneFrom      string            `json:"clone_from,omitempty"`
}

// ExpandBody grows a volume: POST /v1/volumes/{namespace}/{id}/expand.
type ExpandBody struct {
	RequiredBytes int64 `json:"required_bytes"`
	LimitBytes    int64 `json:"limit_bytes,omitempty"`
}

// SnapshotBody snapshots a volume: POST /v1/snapshots. The namespace
// defaults to "default"; secrets to the volume's own.
type SnapshotBody struct {
	Namespace  string            `json:"namespace,omitempty"`
	VolumeID   string            `json:"volume_id"`
	Name       string            `json:"name"`
	Parameters map[string]string `json:"parameters,omitempty"`
	Secrets    map[string]string `json:"secrets,omitempty"`
}

// DeleteSnapshotBody is the optional body of DELETE /v1/snapshots/....
type DeleteSnapshotBody struct {
	Secrets map[string]string `json:"secrets,omitempty"`
}

// ManagedVolumeJSON is a volume with what its plugin knows of it. Secrets
// show as their keys only.
type ManagedVolumeJSON struct {
	VolumeJSON
	ExternalID          string              `json:"external_id"`
	CapacityBytes       int64               `json:"capacity_bytes"`
	Parameters          map[string]string   `json:"parameters"`
	SecretKeys          []string            `json:"secret_keys"`
	Context             map[string]string   `json:"volume_context"`
	MountOptions        *MountOptionsJSON   `json:"mount_options,omitempty"`
	RequestedTopologies []map[string]string `json:"requested_topologies"`
	Created             bool                `json:"created"`
	Deleting            bool                `json:"deleting"`
}

func managedVolumeJSON(v *model.CSIVolume) ManagedVolumeJSON {
	out := ManagedVolumeJSON{
		VolumeJSON: volumeJSON(v), ExternalID: v.PluginVolumeID(), CapacityBytes: v.CapacityBytes,
		Parameters: cloneOrEmpty(v.Parameters), SecretKeys: append([]string{}, v.Secrets.Keys()...), Context: cloneOrEmpty(v.Context),
		RequestedTopologies: []map[string]string{}, Created: v.Created, Deleting: v.Deleting,
	}
	slices.Sort(out.ReadClaims)
	slices.Sort(out.WriteClaims)
	if o := v.MountOptions; o != nil {
		out.MountOptions = &MountOptionsJSON{FSType: o.FSType, MountFlags: append([]string{}, o.MountFlags...)}
	}
	for _, t := range v.RequestedTopologies {
		out.RequestedTopologies = append(out.RequestedTopologies, maps.Clone(t.Segments))
	}
	return out
}

// cloneOrEmpty is a copy of m, {} when m is nil.
func cloneOrEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return maps.Clone(m)
}

// ExpandJSON is the answer to an expand.
type ExpandJSON struct {
	Volume                ManagedVolumeJSON `json:"volume"`
	CapacityBytes         int64             `json:"capacity_bytes"`
	NodeExpansionRequired bool              `json:"node_expansion_required"`
	NodeExpanded          bool              `json:"node_expanded"`
}

// SnapshotJSON is a plugin's snapshot.
type SnapshotJSON struct {
	PluginID       string `json:"plugin_id"`
	SnapshotID     string `json:"snapshot_id"`
	SourceVolumeID string `json:"source_volume_id"`
	SizeBytes      int64  `json:"size_bytes"`
	CreationTime   string `json:"creation_time,omitempty"`
	ReadyToUse     bool   `json:"ready_to_use"`
}

func snapshotJSON(s controller.Snapshot) SnapshotJSON {
	out := SnapshotJSON{PluginID: s.PluginID, SnapshotID: s.ID, SourceVolumeID: s.SourceVolumeID, SizeBytes: s.SizeBytes, ReadyToUse: s.ReadyToUse}
	if !s.CreationTime.IsZero() {
		out.CreationTime = s.CreationTime.UTC().Format(time.RFC3339Nano)
	}
	return out
}

func (s *Server) controllerRoutes() []route {
	return []route{
		{"POST", "/v1/volumes/{namespace}/{id}/create", nil, s.createVolume},
		{"POST", "/v1/volumes/{namespace}/{id}/expand", nil, s.expandVolume},
		{"POST", "/v1/volumes/{namespace}/{id}/modify", nil, s.modifyVolume},
		{"POST", "/v1/snapshots", nil, s.createSnapshot},
		{"GET", "/v1/snapshots", []string{"plugin_id", "namespace", "volume_id", "snapshot_id"}, s.listSnapshots},
		{"DELETE", "/v1/snapshots/{plugin_id}/{snapshot_id}", nil, s.deleteSnapshot},
		{"GET", "/v1/csi/plugins/{name}/capacity", []string{"capability", "parameter", "topology"}, s.pluginCapacity},
	}
}

func (s *Server) needController() error {
	if s.Controller == nil || s.Catalog == nil {
		return fmt.Errorf("%w: this agent runs no CSI controller operations", errNotFound)
	}
	return nil
}

func (s *Server) createVolume(w http.ResponseWriter, r *http.Request) error {
	var body CreateBody
	if err := s.needController(); err != nil {
		return err
	}
	if err := s.decode(w, r, &body, false); err != nil {
		return err
	}
	req := controller.CreateRequest{
		Namespace: r.PathValue("namespace"), ID: r.PathValue("id"), PluginID: body.PluginID, Name: body.Name,
		RequiredBytes: body.Capacity.RequiredBytes, LimitBytes: body.Capacity.LimitBytes,
		Parameters: body.Parameters, Secrets: body.Secrets, SnapshotID: body.SnapshotID, CloneFrom: body.CloneFrom,
		AccessMode:     model.AccessMode(body.AccessMode),
		AttachmentMode: model.AttachmentMode(cmp.Or(body.AttachmentMode, string(model.AttachmentModeFileSystem))),
	}
	if o := body.MountOptions; o != nil {
		req.MountOptions = &model.MountOptions{FSType: o.FSType, MountFlags: o.MountFlags}
	}
	for _, seg := range body.Topology.Requisite {
		req.Requisite = append(req.Requisite, &model.Topology{Segments: seg})
	}
	for _, seg := range body.Topology.Preferred {
		req.Preferred = append(req.Preferred, &model.Topology{Segments: seg})
	}
	v, err := s.Controller.Create(r.Context(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, managedVolumeJSON(v))
	return nil
}

func (s *Server) expandVolume(w http.ResponseWriter, r *http.Request) error {
	var body ExpandBody
	if err := s.needController(); err != nil {
		return err
	}
	if err := s.decode(w, r, &body, false); err != nil {
		return err
	}
	res, err := s.Controller.Expand(r.Context(), r.PathValue("namespace"), r.PathValue("id"), body.RequiredBytes, body.LimitBytes)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, ExpandJSON{
		Volume: managedVolumeJSON(res.Volume), CapacityBytes: res.CapacityBytes,
		NodeExpansionRequired: res.NodeExpansionRequired, NodeExpanded: res.NodeExpanded,
	})
	return nil
}

// deleteThroughController serves DELETE /v1/volumes/{namespace}/{id} for a
// volume created through the controller: it is deleted on the plugin, then
// forgotten. It reports false, touching nothing, when the route should
// only deregister: no controller operations, ?deregister_only=true, or a
// volume that was registered rather than created.
func (s *Server) deleteThroughController(w http.ResponseWriter, r *http.Request) (bool, error) {
	only, err := queryBool(r.URL.Query(), "deregister_only")
	if err != nil {
		return true, err
	}
	if s.Controller == nil || only {
		return false, nil
	}
	ns, id := r.PathValue("namespace"), r.PathValue("id")
	v, err := s.Catalog.GetVolume(r.Context(), ns, id)
	if err != nil || !v.Created {
		return false, nil // the deregistration answers for a missing volume
	}
	if err := s.Controller.Delete(r.Context(), ns, id); err != nil {
		return true, err
	}
	writeJSON(w, http.StatusOK, map[string]string{"deleted": id, "namespace": v.Namespace})
	return true, nil
}

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) error {
	var body SnapshotBody
	if err := s.needController(); err != nil {
		return err
	}
	if err := s.decode(w, r, &body, false); err != nil {
		return err
	}
	snap, err := s.Controller.CreateSnapshot(r.Context(), controller.SnapshotRequest{
		Namespace: body.Namespace, VolumeID: body.VolumeID, Name: body.Name, Parameters: body.Parameters, Secrets: body.Secrets,
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, snapshotJSON(snap))
	return nil
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) error {
	if err := s.needController(); err != nil {
		return err
	}
	q := r.URL.Query()
	list, err := s.Controller.ListSnapshots(r.Context(), controller.ListSnapshotsRequest{
		PluginID: q.Get("plugin_id"), Namespace: q.Get("namespace"), VolumeID: q.Get("volume_id"), SnapshotID: q.Get("snapshot_id"),
	})
	if err != nil {
		return err
	}
	out := make([]SnapshotJSON, 0, len(list))
	for _, snap := range list {
		out = append(out, snapshotJSON(snap))
	}
	writeJSON(w, http.StatusOK, map[string]any{"snapshots": out})
	return nil
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) error {
	var body DeleteSnapshotBody
	if err := s.needController(); err != nil {
		return err
	}
	if err := s.decode(w, r, &body, true); err != nil {
		return err
	}
	plugin, id := r.PathValue("plugin_id"), r.PathValue("snapshot_id")
	if err := s.Controller.DeleteSnapshot(r.Context(), plugin, id, body.Secrets); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"deleted": id, "plugin_id": plugin})
	return nil
}
