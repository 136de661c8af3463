package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/registry"
)

// FleetPlugins is the fleet's plugin view (cluster mode), as fleet.Store
// offers it: the plugins' counts over every live node and their expected
// counts. Refusals match model.ErrPluginNotFound or model.ErrInvalid.
type FleetPlugins interface {
	ListPlugins(ctx context.Context) ([]*model.CSIPlugin, error)
	Plugin(ctx context.Context, name string) (*model.CSIPlugin, error)
	ExpectPlugin(ctx context.Context, name string, nodes, controllers int) (*model.CSIPlugin, error)
}

// PluginViewJSON is a CSI plugin's counts: GET /v1/csi/plugins/{name},
// and each plugin of GET /v1/csi/plugins. Scope is "fleet" when the counts
// are over every live node of the fleet, "node" when they are this
// agent's alone. Type says which services run (see pluginType); Volumes
// counts the catalog's volumes of the plugin, every namespace's.
type PluginViewJSON struct {
	ID                  string   `json:"id"`
	Scope               string   `json:"scope"`
	Type                string   `json:"type"`
	Volumes             int      `json:"volumes"`
	Provider            string   `json:"provider,omitempty"`
	Version             string   `json:"version,omitempty"`
	ControllerRequired  bool     `json:"controller_required"`
	ControllersHealthy  int      `json:"controllers_healthy"`
	ControllersExpected int      `json:"controllers_expected"`
	NodesHealthy        int      `json:"nodes_healthy"`
	NodesExpected       int      `json:"nodes_expected"`
	Controllers         []string `json:"controllers"`
	Nodes               []string `json:"nodes"`
}

// pluginView is p as PluginViewJSON.
func pluginView(p *model.CSIPlugin, scope string) PluginViewJSON {
	keys := func(m map[string]*model.CSIInfo) []string {
		out := make([]string, 0, len(m))
		for k := range m {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	return PluginViewJSON{
		ID: p.ID, Scope: scope, Type: pluginType(p), Provider: p.Provider, Version: p.Version, ControllerRequired: p.ControllerRequired,
		ControllersHealthy: p.ControllersHealthy, ControllersExpected: p.ControllersExpected,
		NodesHealthy: p.NodesHealthy, NodesExpected: p.NodesExpected,
		Controllers: keys(p.Controllers), Nodes: keys(p.Nodes),
	}
}

// ExpectBody declares a plugin's expected counts:
// PUT /v1/csi/plugins/{name}/expect. Zero for both removes the expectation.
type ExpectBody struct {
	Nodes       int `json:"nodes"`
	Controllers int `json:"controllers"`
}

func (s *Server) pluginViewRoutes() []route {
	return []route{
		{"GET", "/v1/csi/plugins", nil, s.listPluginViews},
		{"GET", "/v1/csi/plugins/{name}", nil, s.getPluginView},
		{"PUT", "/v1/csi/plugins/{name}/expect", nil, s.expectPlugin},
	}
}

// getPluginView answers with the fleet's counts in a fleet, else with the
// local catalog's (this node's).
func (s *Server) getPluginView(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if err := registry.ValidateID("plugin name", name); err != nil {
		return err
	}
	if s.FleetPlugins != nil {
		p, err := s.FleetPlugins.Plugin(r.Context(), name)
		if err != nil {
			return err
		}
		return s.writePluginView(w, r, p, "fleet")
	}
	if s.Catalog == nil {
		return fmt.Errorf("%w: this agent runs no CSI catalog", errNotFound)
	}
	plugins, err := s.Catalog.Plugins(r.Context())
	if err != nil {
		return err
	}
	i := slices.IndexFunc(plugins, func(p *model.CSIPlugin) bool { return p.ID == name })
	if i < 0 {
		return fmt.Errorf("%w: plugin %q: this agent has no instance of it, no volume of it and no expectation of it: run the plugin, or declare one with plugvisor plugin expect %s -nodes N", model.ErrPluginNotFound, name, name)
	}
	return s.writePluginView(w, r, plugins[i], "node")
}

// writePluginView answers with p's view.
func (s *Server) writePluginView(w http.ResponseWriter, r *http.Request, p *model.CSIPlugin, scope string) error {
	view, err := s.pluginViewWithVolumes(r, p, scope)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"plugin": view})
	return nil
}

// pluginViewWithVolumes is p's view with its count of volumes.
func (s *Server) pluginViewWithVolumes(r *http.Request, p *model.CSIPlugin, scope string) (PluginViewJSON, error) {
	view := pluginView(p, scope)
	if s.Catalog != nil {
		stubs, err := s.Catalog.ListPluginVolumes(r.Context(), "", p.ID)
		if err != nil {
			return view, err
		}
		view.Volumes = len(stubs)
	}
	return view, nil
}

// expectPlugin checks the body first, so that bad input is refused the
// same way with or without a fleet. In a fleet the expectation is kept in
// etcd; on one agent, in the local catalog's plugin record.
func (s *Server) expectPlugin(w http.ResponseWriter, r *http.Request) error {
	var body ExpectBody
	if err := s.decode(w, r, &body, false); err != nil {
		return err
	}
	name := r.PathValue("name")
	if err := model.CheckExpectation(name, body.Nodes, body.Controllers); err != nil {
		return err
	}
	var p *model.CSIPlugin
	var err error
	scope := "fleet"
	switch {
	case s.FleetPlugins != nil:
		p, err = s.FleetPlugins.ExpectPlugin(r.Context(), name, body.Nodes, body.Controllers)
	case s.Catalog != nil:
		scope = "node"
		p, err = s.Catalog.ExpectPlugin(r.Context(), name, body.Nodes, body.Controllers)
	default:
		return fmt.Errorf("%w: this agent runs no CSI catalog", errNotFound)
	}
	if err != nil {
		return err
	}
	if p == nil {
		writeJSON(w, http.StatusOK, map[string]any{"plugin": nil})
		return nil
	}
	return s.writePluginView(w, r, p, scope)
}
