package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
)

func (s *Server) listPlugins(w http.ResponseWriter, r *http.Request) error {
	ptype := r.URL.Query().Get("type")
	if ptype != "" {
		if err := registry.ValidateID("plugin type", ptype); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"plugins": protoList(s.Registry.ListPlugins(ptype))})
	return nil
}

// PluginBody registers an allocation of a plugin: POST /v1/plugins. A
// plugin registered through the API connects by unix socket only: an
// address is refused, and belongs in a spec file in a watched directory.
// Force registers it even when it replaces a healthy current allocation
// (see checkTakeover).
type PluginBody struct {
	Type       string            `json:"type"`
	Name       string            `json:"name"`
	Version    string            `json:"version,omitempty"`
	AllocID    string            `json:"alloc_id"`
	Connection ConnectionBody    `json:"connection"`
	Options    map[string]string `json:"options,omitempty"`
	Force      bool              `json:"force,omitempty"`
}

// ConnectionBody says how to reach a plugin registered through the API.
type ConnectionBody struct {
	SocketPath string `json:"socket_path"`
	Address    string `json:"address,omitempty"`
}

// pluginInfo is the registration b asks for.
func (b PluginBody) pluginInfo() *messages.PluginInfo {
	return &messages.PluginInfo{
		Type: b.Type, Name: b.Name, Version: b.Version, AllocId: b.AllocID, Options: b.Options,
		Connection: &messages.ConnectionInfo{SocketPath: b.Connection.SocketPath, Address: b.Connection.Address},
	}
}

func (s *Server) registerPlugin(w http.ResponseWriter, r *http.Request) error {
	var body PluginBody
	if err := s.decode(w, r, &body, false); err != nil {
		return err
	}
	info := body.pluginInfo()
	info.RegisteredBy = callerOf(r)
	if err := registry.ValidateRegistration(info); err != nil {
		return err
	}
	previous, _ := s.Registry.Snapshot().Current(info.GetType(), info.GetName())
	if err := s.checkTakeover(info, previous, body.Force); err != nil {
		return err
	}
	if err := s.Registry.RegisterPlugin(info); err != nil {
		return err
	}
	log := s.Logger.Info
	if body.Force {
		log = s.Logger.Warn
	}
	log("plugin registered", "type", info.GetType(), "name", info.GetName(), "alloc_id", info.GetAllocId(),
		"socket", info.GetConnection().GetSocketPath(), "previous", previous.GetAllocId(), "force", body.Force, "by", info.GetRegisteredBy())
	current, _ := s.Registry.Snapshot().Current(info.GetType(), info.GetName())
	writeJSON(w, http.StatusOK, map[string]any{"registered": protoJSON(info), "current": protoJSON(current)})
	return nil
}

func pathIDs(r *http.Request, names ...string) ([]string, error) {
	var errs []error
	values := make([]string, len(names))
	for i, n := range names {
		values[i] = r.PathValue(n)
		errs = append(errs, registry.ValidateID(n, values[i]))
	}
	return values, errors.Join(errs...)
}

func (s *Server) getPlugin(w http.ResponseWriter, r *http.Request) error {
	ids, err := pathIDs(r, "type", "name")
	if err != nil {
		return err
	}
	snap := s.Registry.Snapshot()
	current, ok := snap.Current(ids[0], ids[1])
	if !ok {
		return fmt.Errorf("%w: plugin %q of type %q is not registered", errNotFound, ids[1], ids[0])
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"current":     protoJSON(current),
		"allocations": protoList(snap.Allocations(ids[0], ids[1])),
	})
	return nil
}

func (s *Server) deregisterPlugin(w http.ResponseWriter, r *http.Request) error {
	ids, err := pathIDs(r, "type", "name", "alloc")
	if err != nil {
		return err
	}
	force, err := queryBool(r.URL.Query(), "force")
	if err != nil {
		return err
	}
	if err := s.checkDeregistration(r.Context(), ids[0], ids[1], ids[2], force); err != nil {
		return err
	}
	if err := s.Registry.DeregisterPlugin(ids[0], ids[1], ids[2]); err != nil {
		return err
	}
	log := s.Logger.Info
	if force {
		log = s.Logger.Warn
	}
	log("plugin deregistered", "type", ids[0], "name", ids[1], "alloc_id", ids[2], "force", force, "by", callerOf(r))
	current, _ := s.Registry.Snapshot().Current(ids[0], ids[1])
	writeJSON(w, http.StatusOK, map[string]any{"deregistered": ids[2], "current": protoJSON(current)})
	return nil
}

// csiInstances answers GET /v1/csi/instances: the latest fingerprint of
// each instance of a CSI plugin this agent runs.
func (s *Server) csiInstances(w http.ResponseWriter, _ *http.Request) error {
	if s.CSI == nil {
		return fmt.Errorf("%w: this agent runs no CSI manager", errNotFound)
	}
	writeJSON(w, http.StatusOK, map[string]any{"plugins": protoList(s.CSI.Plugins())})
	return nil
}
