package api

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
)

// Plugin types, as GET /v1/csi/plugins says which services of a plugin
// run (see pluginType).
const (
	PluginTypeNode       = "node"
	PluginTypeController = "controller"
	PluginTypeMonolith   = "monolith"
	PluginTypeSplit      = "split"
)

// pluginType says which services of p run: "controller" or "node" when
// only that one does; "monolith" when one allocation serves both on a
// node; "split" when both run, each in allocations of its own; "" when
// no instance runs (a plugin known by its volumes or its expectation).
func pluginType(p *model.CSIPlugin) string {
	switch {
	case len(p.Controllers) == 0 && len(p.Nodes) == 0:
		return ""
	case len(p.Nodes) == 0:
		return PluginTypeController
	case len(p.Controllers) == 0:
		return PluginTypeNode
	}
	for node, c := range p.Controllers {
		if n := p.Nodes[node]; n != nil && n.AllocID == c.AllocID {
			return PluginTypeMonolith
		}
	}
	return PluginTypeSplit
}

// listPluginViews answers GET /v1/csi/plugins: every CSI plugin, as
// nomad plugin status lists them, with its type, its healthy and expected
// node and controller counts, and its volumes. In a fleet the counts are
// the fleet's (fleet.Store.ListPlugins); on one agent, its catalog's. A
// plugin with volumes and nothing else is listed too.
func (s *Server) listPluginViews(w http.ResponseWriter, r *http.Request) error {
	if s.Catalog == nil {
		return fmt.Errorf("%w: this agent runs no CSI catalog", errNotFound)
	}
	scope, list := "node", s.Catalog.Plugins
	if s.FleetPlugins != nil {
		scope, list = "fleet", s.FleetPlugins.ListPlugins
	}
	plugins, err := list(r.Context())
	if err != nil {
		return err
	}
	stubs, err := s.Catalog.ListPluginVolumes(r.Context(), "", "")
	if err != nil {
		return err
	}
	volumes := map[string]int{}
	for _, v := range stubs {
		volumes[v.PluginID]++
	}
	out := make([]PluginViewJSON, 0, len(plugins))
	for _, p := range plugins {
		view := pluginView(p, scope)
		view.Volumes = volumes[p.ID]
		delete(volumes, p.ID)
		out = append(out, view)
	}
	for id, n := range volumes {
		view := pluginView(model.NewCSIPlugin(id, 0), scope)
		view.Volumes = n
		out = append(out, view)
	}
	slices.SortFunc(out, func(a, b PluginViewJSON) int { return strings.Compare(a.ID, b.ID) })
	writeJSON(w, http.StatusOK, map[string]any{"plugins": out})
	return nil
}
