package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/volumes"
)

// VolumeBody registers a volume: POST /v1/volumes.
type VolumeBody struct {
	ID             string              `json:"id"`
	Namespace      string              `json:"namespace"`
	PluginID       string              `json:"plugin_id"`
	AccessMode     string              `json:"access_mode"`
	AttachmentMode string              `json:"attachment_mode"`
	Topologies     []map[string]string `json:"topologies,omitempty"`
}

// ClaimBody claims a volume for an alloc: POST /v1/volumes/{ns}/{id}/claim.
type ClaimBody struct {
	AllocID  string `json:"alloc_id"`
	ReadOnly bool   `json:"read_only"`
	Release  bool   `json:"release"`
}

// MountBody mounts or unmounts a volume for an alloc:
// POST /v1/volumes/{ns}/{id}/mount and .../unmount.
type MountBody struct {
	AllocID    string            `json:"alloc_id"`
	ReadOnly   bool              `json:"read_only"`
	FSType     string            `json:"fs_type,omitempty"`
	MountFlags []string          `json:"mount_flags,omitempty"`
	VolumeCtx  map[string]string `json:"volume_context,omitempty"`
	PublishCtx map[string]string `json:"publish_context,omitempty"`
}

// VolumeJSON is a volume as the API renders it.
type VolumeJSON struct {
	ID             string              `json:"id"`
	Namespace      string              `json:"namespace"`
	PluginID       string              `json:"plugin_id"`
	AccessMode     string              `json:"access_mode"`
	AttachmentMode string              `json:"attachment_mode"`
	Topologies     []map[string]string `json:"topologies,omitempty"`
	Schedulable    bool                `json:"schedulable"`
	NodesHealthy   int                 `json:"nodes_healthy"`
	ReadClaims     []string            `json:"read_claims"`
	WriteClaims    []string            `json:"write_claims"`
	CreateIndex    uint64              `json:"create_index"`
	ModifyIndex    uint64              `json:"modify_index"`
}

func volumeJSON(v *model.CSIVolume) VolumeJSON {
	out := VolumeJSON{
		ID: v.ID, Namespace: v.Namespace, PluginID: v.PluginID,
		AccessMode: string(v.AccessMode), AttachmentMode: string(v.AttachmentMode),
		Schedulable: v.Schedulable, NodesHealthy: v.NodesHealthy,
		ReadClaims: []string{}, WriteClaims: []string{},
		CreateIndex: v.CreateIndex, ModifyIndex: v.ModifyIndex,
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
	return out
}

func (s *Server) volumeRoutes(route func(string, func(http.ResponseWriter, *http.Request) error)) {
	route("POST /v1/volumes", s.registerVolume)
	route("GET /v1/volumes", s.listVolumes)
	route("GET /v1/volumes/{namespace}/{id}", s.getVolume)
	route("DELETE /v1/volumes/{namespace}/{id}", s.deregisterVolume)
	route("POST /v1/volumes/{namespace}/{id}/claim", s.claimVolume)
	route("POST /v1/volumes/{namespace}/{id}/mount", s.mountVolume)
	route("POST /v1/volumes/{namespace}/{id}/unmount", s.unmountVolume)
	for _, path := range []string{"/v1/volumes", "/v1/volumes/{namespace}/{id}", "/v1/volumes/{namespace}/{id}/claim",
		"/v1/volumes/{namespace}/{id}/mount", "/v1/volumes/{namespace}/{id}/unmount"} {
		route(path, func(http.ResponseWriter, *http.Request) error { return errMethod })
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
	if err := decodeJSON(w, r, &body); err != nil {
		return err
	}
	if err := s.notADockerPlugin(body.PluginID); err != nil {
		return err
	}
	access, err := model.ParseAccessMode(body.AccessMode)
	if err != nil {
		return err
	}
	attach, err := model.ParseAttachmentMode(body.AttachmentMode)
	if err != nil {
		return err
	}
	v := model.NewCSIVolume(body.ID, 0)
	v.Namespace, v.PluginID, v.AccessMode, v.AttachmentMode = body.Namespace, body.PluginID, access, attach
	if v.Namespace == "" {
		v.Namespace = model.DefaultNamespace
	}
	for _, seg := range body.Topologies {
		v.Topologies = append(v.Topologies, &model.Topology{Segments: seg})
	}
	got, err := s.Catalog.RegisterVolume(r.Context(), v)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, volumeJSON(got))
	return nil
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) error {
	if err := s.needVolumes(); err != nil {
		return err
	}
	stubs, err := s.Catalog.ListVolumes(r.Context(), r.URL.Query().Get("namespace"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"volumes": stubs})
	return nil
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

// claimRequest builds the catalog claim of an alloc on a registered volume.
func (s *Server) claimRequest(r *http.Request, alloc string, readOnly bool) (csi.ClaimRequest, error) {
	v, err := s.Catalog.GetVolume(r.Context(), r.PathValue("namespace"), r.PathValue("id"))
	if err != nil {
		return csi.ClaimRequest{}, err
	}
	return csi.ClaimRequest{
		Plugin: v.PluginID, Namespace: v.Namespace, VolumeID: v.ID, AllocID: alloc,
		Usage: csi.Usage{ReadOnly: readOnly, AttachmentMode: v.AttachmentMode, AccessMode: v.AccessMode},
	}, nil
}

func (s *Server) claimVolume(w http.ResponseWriter, r *http.Request) error {
	if err := s.needVolumes(); err != nil {
		return err
	}
	var body ClaimBody
	if err := decodeJSON(w, r, &body); err != nil {
		return err
	}
	req, err := s.claimRequest(r, body.AllocID, body.ReadOnly)
	if err != nil {
		return err
	}
	if body.Release {
		err = s.Catalog.Release(r.Context(), req)
	} else {
		err = s.Catalog.Claim(r.Context(), req)
	}
	if err != nil {
		return err
	}
	v, err := s.Catalog.GetVolume(r.Context(), req.Namespace, req.VolumeID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, volumeJSON(v))
	return nil
}

// mountTarget decodes a mount or unmount body and finds the volume and
// the mounter of its plugin.
func (s *Server) mountTarget(w http.ResponseWriter, r *http.Request) (MountBody, *model.CSIVolume, *volumes.Mounter, error) {
	var body MountBody
	if err := s.needVolumes(); err != nil {
		return body, nil, nil, err
	}
	if err := decodeJSON(w, r, &body); err != nil {
		return body, nil, nil, err
	}
	v, err := s.Catalog.GetVolume(r.Context(), r.PathValue("namespace"), r.PathValue("id"))
	if err != nil {
		return body, nil, nil, err
	}
	m, err := s.Volumes.MounterForPlugin(r.Context(), v.PluginID)
	return body, v, m, err
}

func (s *Server) mountVolume(w http.ResponseWriter, r *http.Request) error {
	body, v, m, err := s.mountTarget(w, r)
	if err != nil {
		return err
	}
	req := volumes.MountRequest{
		Volume:         volumes.VolumeSpec{Namespace: v.Namespace, ID: v.ID, Context: body.VolumeCtx},
		AllocID:        body.AllocID,
		AccessMode:     v.AccessMode,
		AttachmentMode: v.AttachmentMode,
		ReadOnly:       body.ReadOnly,
		PublishContext: body.PublishCtx,
	}
	if body.FSType != "" || body.MountFlags != nil {
		req.MountOptions = &volumes.MountOptions{FSType: body.FSType, MountFlags: body.MountFlags}
	}
	res, err := m.MountVolume(r.Context(), req)
	s.observeMount("mount", err)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"target_path": res.TargetPath, "staging_path": res.StagingPath, "is_device": res.IsDevice})
	return nil
}

func (s *Server) unmountVolume(w http.ResponseWriter, r *http.Request) error {
	body, v, m, err := s.mountTarget(w, r)
	if err != nil {
		return err
	}
	err = m.UnmountVolume(r.Context(), volumes.UnmountRequest{Namespace: v.Namespace, VolumeID: v.ID, AllocID: body.AllocID})
	s.observeMount("unmount", err)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"unmounted": v.ID, "alloc_id": body.AllocID})
	return nil
}

func (s *Server) observeMount(op string, err error) {
	if s.OnMount != nil {
		s.OnMount(op, err)
	}
}

// errorClasses maps the catalog's and volume manager's sentinels to HTTP
// statuses.
var errorClasses = []struct {
	status int
	errs   []error
}{
	{http.StatusBadRequest, []error{catalog.ErrCatalogInvalid, csi.ErrInvalidVolumeRequest, model.ErrInvalidVolume,
		model.ErrInvalidClaim, model.ErrUnknownAccessMode, model.ErrUnknownAttachmentMode, model.ErrUnknownClaimMode}},
	{http.StatusNotFound, []error{catalog.ErrVolumeNotFound, volumes.ErrPluginNotFound, volumes.ErrNotMounted, model.ErrClaimNotFound}},
	{http.StatusConflict, []error{csi.ErrClaimRefused, catalog.ErrVolumeInUse, model.ErrWriteClaimRefused, model.ErrVolumeMaxClaims,
		model.ErrNodeConflict, model.ErrClaimModeConflict, model.ErrClaimReleasing, model.ErrVolumeUnschedulable,
		model.ErrPluginMismatch}},
	{http.StatusServiceUnavailable, []error{catalog.ErrCatalogShutdown, volumes.ErrVolumesShutDown}},
}

func classOf(err error) int {
	for _, c := range errorClasses {
		for _, e := range c.errs {
			if errors.Is(err, e) {
				return c.status
			}
		}
	}
	return 0
}

func isInvalid(err error) bool  { return classOf(err) == http.StatusBadRequest }
func isNotFound(err error) bool { return classOf(err) == http.StatusNotFound }
func isConflict(err error) bool { return classOf(err) == http.StatusConflict }
