package api

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/dockervolume"
	dockervolumes "github.com/plugvisor/plugvisor/dockervolume/volumes"
	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/messages"
)

// DockerVolumeBody is the body of POST /v1/docker/volumes. An empty name
// makes an anonymous volume; an empty driver is dockervolumes.DefaultDriver.
type DockerVolumeBody struct {
	Name    string            `json:"name,omitempty"`
	Driver  string            `json:"driver,omitempty"`
	Options map[string]string `json:"options,omitempty"`
}

// DockerMountBody is the body of POST /v1/docker/volumes/{name}/mount and /unmount.
type DockerMountBody struct {
	// ID is the mount ID: one per user of the volume (Docker uses the container's).
	ID string `json:"id"`
}

// dockerRoutes are the Docker volume service's routes and the discovered
// plugins' states.
func (s *Server) dockerRoutes() []route {
	return []route{
		{"GET", "/v1/docker/volumes", nil, s.dockerList},
		{"POST", "/v1/docker/volumes", nil, s.dockerCreate},
		{"GET", "/v1/docker/volumes/{name}", nil, s.dockerInspect},
		{"DELETE", "/v1/docker/volumes/{name}", []string{"force"}, s.dockerRemove},
		{"POST", "/v1/docker/volumes/{name}/mount", nil, s.dockerMount},
		{"POST", "/v1/docker/volumes/{name}/unmount", nil, s.dockerUnmount},
		{"GET", "/v1/docker/volumes/{name}/path", nil, s.dockerPath},
		{"GET", "/v1/docker/plugins", nil, s.dockerPlugins},
		{"GET", "/v1/discovery/plugins", nil, s.discovered},
	}
}

// DockerVolumeJSON is a Docker volume as the API renders it: its maps and
// lists are always present, {} and [] when empty.
type DockerVolumeJSON struct {
	dockervolumes.Volume
	Options       map[string]string `json:"options"`
	Mounts        map[string]int    `json:"mounts"`
	PendingMounts []string          `json:"pending_mounts"`
	Status        map[string]any    `json:"status"`
}

// DockerVolumeListJSON is GET /v1/docker/volumes: warnings name the
// drivers whose list failed.
type DockerVolumeListJSON struct {
	Volumes  []DockerVolumeJSON `json:"volumes"`
	Warnings []string           `json:"warnings"`
}

func dockerVolumeJSON(v dockervolumes.Volume) DockerVolumeJSON {
	out := DockerVolumeJSON{Volume: v, Options: map[string]string{}, Mounts: map[string]int{},
		PendingMounts: append([]string{}, v.PendingMounts...), Status: map[string]any{}}
	maps.Copy(out.Options, v.Options)
	maps.Copy(out.Mounts, v.Mounts)
	maps.Copy(out.Status, v.Status)
	return out
}

// errDockerPlugin: a CSI volume was asked of a Docker volume plugin.
var errDockerPlugin = errclass.New(errclass.Invalid, "plugin is a Docker volume plugin, not a CSI plugin")

// notADockerPlugin refuses a CSI volume on a plugin that is registered only
// as a Docker volume plugin, which would register and then never mount.
func (s *Server) notADockerPlugin(plugin string) error {
	snap := s.Registry.Snapshot()
	if _, docker := snap.Current(dockervolume.PluginType, plugin); !docker {
		return nil
	}
	for _, t := range snap.Types() {
		if strings.HasPrefix(t, "csi-") {
			if _, ok := snap.Current(t, plugin); ok {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: %q; create the volume with plugvisor docker volume create -driver %s NAME (POST /v1/docker/volumes)",
		errDockerPlugin, plugin, plugin)
}

func (s *Server) dockerVolumes() (DockerVolumes, error) {
	if s.DockerVolumes == nil {
		return nil, fmt.Errorf("%w: this agent runs no Docker volume service", errNotFound)
	}
	return s.DockerVolumes, nil
}

func (s *Server) dockerList(w http.ResponseWriter, r *http.Request) error {
	v, err := s.dockerVolumes()
	if err != nil {
		return err
	}
	list, err := v.List(r.Context())
	if err != nil {
		return err
	}
	out := DockerVolumeListJSON{Volumes: make([]DockerVolumeJSON, 0, len(list.Volumes)), Warnings: append([]string{}, list.Warnings...)}
	for _, info := range list.Volumes {
		out.Volumes = append(out.Volumes, dockerVolumeJSON(info))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) dockerCreate(w http.ResponseWriter, r *http.Request) error {
	v, err := s.dockerVolumes()
	if err != nil {
		return err
	}
	var body DockerVolumeBody
	if err := s.decode(w, r, &body, false); err != nil {
		return err
	}
	info, err := v.Create(r.Context(), body.Name, body.Driver, body.Options)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, dockerVolumeJSON(info))
	return nil
}

func (s *Server) dockerInspect(w http.ResponseWriter, r *http.Request) error {
	v, err := s.dockerVolumes()
	if err != nil {
		return err
	}
	info, err := v.Inspect(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, dockerVolumeJSON(info))
	return nil
}

func (s *Server) dockerRemove(w http.ResponseWriter, r *http.Request) error {
	v, err := s.dockerVolumes()
	if err != nil {
		return err
	}
	force, err := queryBool(r.URL.Query(), "force")
	if err != nil {
		return err
	}
	remove := v.Remove
	if force {
		remove = v.ForceRemove
	}
	if err := remove(r.Context(), r.PathValue("name")); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"removed": r.PathValue("name")})
	return nil
}

func (s *Server) dockerMount(w http.ResponseWriter, r *http.Request) error {
	v, err := s.dockerVolumes()
	if err != nil {
		return err
	}
	var body DockerMountBody
	if err := s.decode(w, r, &body, false); err != nil {
		return err
	}
	mountpoint, err := v.Mount(r.Context(), r.PathValue("name"), body.ID)
	s.observeMount("docker-mount", err)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"name": r.PathValue("name"), "id": body.ID, "mountpoint": mountpoint})
	return nil
}

func (s *Server) dockerUnmount(w http.ResponseWriter, r *http.Request) error {
	v, err := s.dockerVolumes()
	if err != nil {
		return err
	}
	var body DockerMountBody
	if err := s.decode(w, r, &body, false); err != nil {
		return err
	}
	err = v.Unmount(r.Context(), r.PathValue("name"), body.ID)
	s.observeMount("docker-unmount", err)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"name": r.PathValue("name"), "unmounted": body.ID})
	return nil
}

func (s *Server) dockerPath(w http.ResponseWriter, r *http.Request) error {
	v, err := s.dockerVolumes()
	if err != nil {
		return err
	}
	mountpoint, err := v.Path(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"name": r.PathValue("name"), "mountpoint": mountpoint})
	return nil
}

func (s *Server) dockerPlugins(w http.ResponseWriter, _ *http.Request) error {
	if s.DockerPlugins == nil {
		return fmt.Errorf("%w: this agent runs no Docker volume manager", errNotFound)
	}
	plugins := s.DockerPlugins.Plugins()
	out := make([]json.RawMessage, 0, len(plugins))
	for _, p := range plugins {
		// The instance's actor PID is the agent's business, not the API's.
		p = proto.CloneOf(p)
		p.Instance = nil
		out = append(out, protoJSON(p))
	}
	writeJSON(w, http.StatusOK, map[string]any{"plugins": out})
	return nil
}

func (s *Server) discovered(w http.ResponseWriter, _ *http.Request) error {
	if s.Discovery == nil {
		return fmt.Errorf("%w: this agent runs no discovery", errNotFound)
	}
	writeJSON(w, http.StatusOK, map[string]any{"plugins": protoList(s.Discovery.Plugins())})
	return nil
}

// DockerPlugins gives the latest health of every Docker volume plugin.
type DockerPlugins interface {
	Plugins() []*messages.DockerVolumePluginHealth
}

// DiscoveredPlugins gives what discovery knows of every plugin found on disk.
type DiscoveredPlugins interface {
	Plugins() []*messages.DiscoveredPlugin
}
