package agent

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
)

// storeHealth remembers whether the registry's latest durable write
// failed. The registry's actor reports each write from its goroutine; the
// API reads at any time.
type storeHealth struct {
	failure atomic.Pointer[string]
}

// observe hears of one answered registry write: a store failure marks the
// store failing, a success clears it, and a refused request (bad input,
// not found) says nothing about the store.
func (s *storeHealth) observe(err error) {
	switch {
	case err == nil:
		s.failure.Store(nil)
	case errors.Is(err, registry.ErrStore):
		msg := err.Error()
		s.failure.Store(&msg)
	}
}

// failing is the latest write's store failure, or "".
func (s *storeHealth) failing() string {
	if p := s.failure.Load(); p != nil {
		return *p
	}
	return ""
}

// maxNamed bounds how many plugins a health reason names.
const maxNamed = 5

// health summarises the agent for GET /v1/health: it is starting until
// every CSI plugin it restored has been fingerprinted once (starting.go),
// and degraded while the
// store fails writes, etcd does not answer or this node's lease is lost
// (cluster mode), any plugin instance is unhealthy, or discovery has
// plugins it could not activate or parse.
func (a *Agent) health() api.Health {
	h := api.Health{
		DataDir:          a.cfg.DataDir,
		Plugins:          len(a.registry.ListPlugins("")),
		Discovered:       len(a.found()),
		DiscoveredStates: discoveredStates(a.Plugins()),
	}
	h.Reasons, h.Starting = a.startingReasons(h.Reasons)
	if failure := a.storeHealth.failing(); failure != "" {
		h.Reasons = append(h.Reasons, "store: the latest durable write failed: "+failure)
	}
	h.Reasons = append(h.Reasons, a.fleetReasons()...)
	var sick []string
	for _, fp := range a.csi.Plugins() {
		h.CSIInstances.Total++
		if fp.GetHealthy() {
			h.CSIInstances.Healthy++
		} else {
			sick = append(sick, fmt.Sprintf("%s %s (%s)", fp.GetType(), fp.GetName(), fp.GetHealthDescription()))
		}
	}
	h.Reasons = appendReason(h.Reasons, "CSI plugin instances are unhealthy", sick)
	sick = nil
	for _, p := range a.docker.Plugins() {
		h.DockerInstances.Total++
		if p.GetHealthy() {
			h.DockerInstances.Healthy++
		} else {
			sick = append(sick, fmt.Sprintf("%s (%s)", p.GetName(), p.GetDescription()))
		}
	}
	h.Reasons = appendReason(h.Reasons, "Docker volume plugin instances are unhealthy", sick)
	h.PluginTypes, h.Reasons = a.pluginTypesHealth(h.Reasons)
	sick = nil
	for _, p := range a.found() {
		switch p.GetState() {
		case messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_FAILED,
			messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_INVALID:
			h.DiscoveryFailures++
			sick = append(sick, fmt.Sprintf("%s (%s)", p.GetName(), p.GetError()))
		}
	}
	h.Reasons = appendReason(h.Reasons, "discovered plugins failed", sick)
	return h
}

// fleetReasons are why the fleet is degraded for this node, in cluster
// mode: etcd did not answer its latest call, the node's lease is at risk
// or lost (claims and mounts then wait or answer 503), another agent holds
// the node ID, or other members do not answer this one's pings. Each
// clears by itself once the cause is gone.
func (a *Agent) fleetReasons() []string {
	s := a.fleetStore()
	if s == nil {
		return nil
	}
	var reasons []string
	if err := s.EtcdUnreachable(); err != nil {
		reasons = append(reasons, err.Error())
	}
	if why := s.IdentityLost(); why != "" {
		reasons = append(reasons, "fleet: "+why)
	}
	reasons = appendReason(reasons, "fleet: cluster members do not answer this one (changes of the volumes whose grains they run wait or fail here)",
		a.member.Unreachable())
	if standing := s.Standing(time.Now()); standing != model.StandingHeld {
		reasons = append(reasons, fmt.Sprintf("fleet: this node's lease is %s (last renewed %v ago, TTL %v): new claims and mounts are refused until etcd renews it",
			standing, time.Since(s.LeaseRenewed()).Round(time.Millisecond), a.cfg.Cluster.LeaseTTL))
	}
	return reasons
}

// appendReason adds "<n> <what>: <the first few>" when there are any.
func appendReason(reasons []string, what string, names []string) []string {
	if len(names) == 0 {
		return reasons
	}
	reason := fmt.Sprintf("%d %s: %s", len(names), what, strings.Join(names[:min(len(names), maxNamed)], "; "))
	if len(names) > maxNamed {
		reason += fmt.Sprintf("; and %d more", len(names)-maxNamed)
	}
	return append(reasons, reason)
}

// pluginTypesHealth counts the instances of each of the embedder's plugin
// types, and adds a reason for each type with unhealthy ones.
func (a *Agent) pluginTypesHealth(reasons []string) (map[string]api.InstanceCounts, []string) {
	if len(a.cfg.PluginTypes) == 0 {
		return nil, reasons
	}
	counts := make(map[string]api.InstanceCounts, len(a.cfg.PluginTypes))
	for _, t := range a.cfg.PluginTypes {
		var c api.InstanceCounts
		var sick []string
		for _, h := range t.Manager.Instances() {
			c.Total++
			if h.Healthy {
				c.Healthy++
			} else {
				sick = append(sick, fmt.Sprintf("%s (%s)", h.Name, h.Description))
			}
		}
		counts[t.Name] = c
		reasons = appendReason(reasons, t.Name+" plugin instances are unhealthy", sick)
	}
	return counts, reasons
}
