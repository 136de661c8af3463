package api

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/controller"
)

// PluginCapacityJSON is a plugin's GetCapacity answer:
// GET /v1/csi/plugins/{name}/capacity. The sizes are absent when the
// plugin did not give them.
type PluginCapacityJSON struct {
	PluginID          string `json:"plugin_id"`
	AvailableBytes    int64  `json:"available_bytes"`
	MaximumVolumeSize *int64 `json:"maximum_volume_size,omitempty"`
	MinimumVolumeSize *int64 `json:"minimum_volume_size,omitempty"`
}

// pluginCapacity asks the plugin's controller GetCapacity, with the
// capabilities (capability=access=MODE[,attachment=MODE][,fs=TYPE],
// repeatable, model.ParseCapability: the CLI's syntax),
// parameters (parameter=K=V, repeatable) and topology (topology=K=V[,K=V])
// of the query.
func (s *Server) pluginCapacity(w http.ResponseWriter, r *http.Request) error {
	if err := s.needController(); err != nil {
		return err
	}
	req, err := capacityRequest(r.PathValue("name"), r.URL.Query())
	if err != nil {
		return err
	}
	res, err := s.Controller.Capacity(r.Context(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, PluginCapacityJSON{PluginID: req.PluginID, AvailableBytes: res.AvailableBytes,
		MaximumVolumeSize: res.MaximumVolumeSize, MinimumVolumeSize: res.MinimumVolumeSize})
	return nil
}

// capacityRequest reads a capacity query; a malformed value is
// controller.ErrInvalidRequest naming its parameter.
func capacityRequest(plugin string, q url.Values) (controller.CapacityRequest, error) {
	req := controller.CapacityRequest{PluginID: plugin}
	bad := func(field, v, want string) error {
		return fmt.Errorf("%w: %s %q is not %s", controller.ErrInvalidRequest, field, v, want)
	}
	for _, c := range q["capability"] {
		if access, attach, _ := strings.Cut(c, "/"); !strings.Contains(c, "=") {
			return req, fmt.Errorf("%w: capability %q: the form ACCESS/ATTACHMENT is no longer taken; give the CLI's, %s: capability=access=%s,attachment=%s",
				controller.ErrInvalidRequest, c, model.CapabilitySyntax, access, cmp.Or(attach, string(model.AttachmentModeFileSystem)))
		}
		parsed, err := model.ParseCapability(c)
		if err != nil {
			return req, fmt.Errorf("%w: capability: %w", controller.ErrInvalidRequest, err)
		}
		req.Capabilities = append(req.Capabilities, parsed)
	}
	for _, p := range q["parameter"] {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return req, bad("parameter", p, "KEY=VALUE")
		}
		if req.Parameters == nil {
			req.Parameters = map[string]string{}
		}
		req.Parameters[k] = v
	}
	switch t := q["topology"]; len(t) {
	case 0:
	case 1:
		req.Topology = &model.Topology{Segments: map[string]string{}}
		for _, seg := range strings.Split(t[0], ",") {
			k, v, ok := strings.Cut(seg, "=")
			if !ok {
				return req, bad("topology", t[0], "KEY=VALUE[,KEY=VALUE]")
			}
			req.Topology.Segments[k] = v
		}
	default:
		return req, fmt.Errorf("%w: topology is given %d times; GetCapacity takes one topology: join its segments with commas", controller.ErrInvalidRequest, len(t))
	}
	return req, nil
}
