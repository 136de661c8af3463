package api

import "net/http"

// ModifyBody changes a volume's mutable parameters with the plugin's
// controller: POST /v1/volumes/{namespace}/{id}/modify.
type ModifyBody struct {
	MutableParameters map[string]string `json:"mutable_parameters"`
}

func (s *Server) modifyVolume(w http.ResponseWriter, r *http.Request) error {
	var body ModifyBody
	if err := s.needController(); err != nil {
		return err
	}
	if err := s.decode(w, r, &body, false); err != nil {
		return err
	}
	v, err := s.Controller.Modify(r.Context(), r.PathValue("namespace"), r.PathValue("id"), body.MutableParameters)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"volume": managedVolumeJSON(v)})
	return nil
}
