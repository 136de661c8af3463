package api

import (
	"cmp"
	"net/http"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
)

// VolumeBatchBody registers several volumes, all or none (Nomad's
// Volumes[]): POST /v1/volumes:batch. At most model.MaxBatch volumes,
// each named once.
type VolumeBatchBody struct {
	Volumes []VolumeBody `json:"volumes"`
}

// DeregisterBatchBody deregisters several volumes of one namespace, all or
// none (Nomad's VolumeIDs[]): POST /v1/volumes:deregister.
type DeregisterBatchBody struct {
	Namespace string   `json:"namespace"`
	VolumeIDs []string `json:"volume_ids"`
}

func (s *Server) registerVolumes(w http.ResponseWriter, r *http.Request) error {
	if err := s.needVolumes(); err != nil {
		return err
	}
	var body VolumeBatchBody
	if err := s.decode(w, r, &body, false); err != nil {
		return err
	}
	named := make([]*model.CSIVolume, len(body.Volumes))
	for i, b := range body.Volumes {
		named[i] = &model.CSIVolume{ID: b.ID, Namespace: b.Namespace}
	}
	if err := model.CheckRegisterBatch(named); err != nil {
		return err
	}
	vs := make([]*model.CSIVolume, len(body.Volumes))
	for i, b := range body.Volumes {
		v, err := s.volumeFromBody(r.Context(), b)
		if err != nil {
			return model.BatchItemError(i, b.ID, err)
		}
		vs[i] = v
	}
	got, err := s.Catalog.RegisterVolumes(r.Context(), vs)
	if err != nil {
		return err
	}
	out := make([]VolumeJSON, len(got))
	for i, v := range got {
		out[i] = volumeJSON(v)
	}
	writeJSON(w, http.StatusOK, map[string]any{"volumes": out})
	return nil
}

func (s *Server) deregisterVolumes(w http.ResponseWriter, r *http.Request) error {
	if err := s.needVolumes(); err != nil {
		return err
	}
	var body DeregisterBatchBody
	if err := s.decode(w, r, &body, false); err != nil {
		return err
	}
	if err := s.Catalog.DeregisterVolumes(r.Context(), body.Namespace, body.VolumeIDs); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"deregistered": body.VolumeIDs, "namespace": cmp.Or(body.Namespace, model.DefaultNamespace)})
	return nil
}
