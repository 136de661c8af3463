package api

import (
	"net/http"

	"github.com/plugvisor/plugvisor/version"
)

// Health is the answer to GET /v1/health. Status is "starting" while
// Starting is set, else "degraded" when any reason is given, else "ok";
// the answer is 200 either way, since the agent serves.
type Health struct {
	Status  string   `json:"status"`
	Reasons []string `json:"reasons"`
	// Starting says the agent still waits for plugins it restored to be
	// heard of once (a reason names them): until then claims of their
	// volumes may be refused.
	Starting bool `json:"-"`
	// Build is the agent's build; the API fills it in.
	Build   version.Info `json:"build"`
	DataDir string       `json:"data_dir,omitempty"`
	// Plugins counts the registry's current plugins.
	Plugins int `json:"plugins"`
	// CSIInstances and DockerInstances count plugin instances by health.
	CSIInstances    InstanceCounts `json:"csi_instances"`
	DockerInstances InstanceCounts `json:"docker_instances"`
	// PluginTypes counts the instances of each plugin type the embedder
	// added to the agent (agent.PluginType), by type.
	PluginTypes map[string]InstanceCounts `json:"plugin_types,omitempty"`
	// Discovered counts the plugins discovery knows of, and
	// DiscoveryFailures those of them that failed activation or are
	// invalid.
	Discovered        int `json:"discovered"`
	DiscoveryFailures int `json:"discovery_failures"`
	// DiscoveredStates counts the discovered plugins by state (activating,
	// registered, failed, invalid) and, of those checked, by health
	// (healthy, unhealthy).
	DiscoveredStates map[string]int `json:"discovered_states"`
}

// InstanceCounts counts plugin instances.
type InstanceCounts struct {
	Healthy int `json:"healthy"`
	Total   int `json:"total"`
}

func (s *Server) health(w http.ResponseWriter, _ *http.Request) error {
	var h Health
	if s.Health != nil {
		h = s.Health()
	}
	h.Build = version.Get()
	if h.DiscoveredStates == nil {
		h.DiscoveredStates = map[string]int{}
	}
	switch {
	case h.Starting:
		h.Status = "starting"
	case len(h.Reasons) > 0:
		h.Status = "degraded"
	default:
		h.Status = "ok"
		h.Reasons = []string{}
	}
	writeJSON(w, http.StatusOK, h)
	return nil
}
