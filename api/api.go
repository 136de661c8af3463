// Package api serves plugvisor's HTTP JSON API (v1), which the agent serves
// on its unix socket and, optionally, on TCP. Server.HandlerFor guards the
// routes for one listener (Host header, ACL tokens, JSON writes, body
// size). Handlers are thin: they decode, call a facade (registry, CSI
// manager, catalog, volumes), and encode. Errors are JSON
// {"error": "..."} with a status code that matches the facade's sentinel.
package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi/catalog"
	"github.com/plugvisor/plugvisor/csi/controller"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/dockervolume"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
)

// MaxBodyBytes bounds a request body.
const MaxBodyBytes = 1 << 20

// CSIPlugins gives the latest fingerprint of every CSI plugin instance.
type CSIPlugins interface {
	Plugins() []*messages.CSIFingerprint
}

// Server holds what the API serves. Registry is required; a nil CSI,
// Catalog, Volumes or Metrics turns their endpoints into 404s that say so.
type Server struct {
	Registry *registry.Registry
	CSI      CSIPlugins
	Catalog  *catalog.Catalog
	Volumes  *volumes.Manager
	// Controller runs create, expand, delete and snapshots through the
	// plugins' controllers (api/controller.go); nil turns them into 404s.
	Controller *controller.Controller
	Metrics    http.Handler
	Logger     hclog.Logger
	// OnMount, when set, hears of every mount and unmount ("mount",
	// "unmount") and its error.
	OnMount func(op string, err error)
	// Health reports the agent's components for GET /v1/health; nil
	// means just "ok".
	Health func() Health
	// DockerVolumes, DockerPlugins and Discovery serve /v1/docker/... and
	// /v1/discovery/plugins; nil turns those endpoints into 404s.
	DockerVolumes *dockervolume.Volumes
	DockerPlugins DockerPlugins
	Discovery     DiscoveredPlugins
}

// Handler returns the API's routes, unguarded: serve them through
// HandlerFor, which checks each request against its listener first.
func (s *Server) Handler() http.Handler {
	if s.Logger == nil {
		s.Logger = hclog.NewNullLogger()
	}
	mux := http.NewServeMux()
	route := func(pattern string, h func(http.ResponseWriter, *http.Request) error) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if err := h(w, r); err != nil {
				s.writeError(w, r, err)
			}
		})
	}
	route("GET /v1/health", s.health)
	route("GET /v1/plugins", s.listPlugins)
	route("POST /v1/plugins", s.registerPlugin)
	route("GET /v1/plugins/{type}/{name}", s.getPlugin)
	route("DELETE /v1/plugins/{type}/{name}/{alloc}", s.deregisterPlugin)
	route("GET /v1/events", streaming(s.events))
	route("GET /v1/csi/plugins", s.csiPlugins)
	s.volumeRoutes(route)
	s.controllerRoutes(route)
	s.dockerRoutes(route)
	paths := []string{"/v1/health", "/v1/plugins", "/v1/plugins/{type}/{name}",
		"/v1/plugins/{type}/{name}/{alloc}", "/v1/events", "/v1/csi/plugins"}
	if s.Metrics != nil {
		mux.Handle("GET /metrics", s.Metrics)
		paths = append(paths, "/metrics")
	}
	// Anything else: JSON 404, and JSON 405 for a known path with the
	// wrong method (the method patterns above are more specific).
	for _, path := range paths {
		route(path, func(http.ResponseWriter, *http.Request) error { return errMethod })
	}
	route("/", func(_ http.ResponseWriter, r *http.Request) error {
		return fmt.Errorf("%w: no such endpoint %s", errNotFound, r.URL.Path)
	})
	return mux
}

var (
	errMethod   = errors.New("api: method not allowed")
	errNotFound = errors.New("api: not found")
	errBadBody  = errors.New("api: bad request body")
)

// statusOf maps an error to its HTTP status.
func statusOf(err error) int {
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, errMethod):
		return http.StatusMethodNotAllowed
	case errors.Is(err, errBadBody), errors.Is(err, registry.ErrInvalid), isInvalid(err):
		return http.StatusBadRequest
	case errors.Is(err, errNotFound), errors.Is(err, registry.ErrNotFound), errors.Is(err, registry.ErrNoDispenser), isNotFound(err):
		return http.StatusNotFound
	case errors.Is(err, registry.ErrLimit):
		return http.StatusTooManyRequests
	case errors.Is(err, registry.ErrShutdown):
		return http.StatusServiceUnavailable
	case pluginStatus(err) != 0:
		return pluginStatus(err)
	case classOf(err) != 0:
		return classOf(err)
	}
	return http.StatusInternalServerError
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status := statusOf(err)
	if status >= 500 {
		s.Logger.Error("request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	} else {
		s.Logger.Debug("request refused", "method", r.Method, "path", r.URL.Path, "status", status, "error", err)
	}
	writeJSON(w, status, map[string]string{"error": err.Error()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

var (
	marshal   = protojson.MarshalOptions{UseProtoNames: true}
	unmarshal = protojson.UnmarshalOptions{DiscardUnknown: false}
)

// protoJSON turns a message into JSON for embedding in a response.
func protoJSON(m proto.Message) json.RawMessage {
	b, err := marshal.Marshal(m)
	if err != nil {
		return json.RawMessage(`null`)
	}
	return b
}

func protoList[M proto.Message](items []M) []json.RawMessage {
	out := make([]json.RawMessage, 0, len(items))
	for _, m := range items {
		out = append(out, protoJSON(m))
	}
	return out
}

// readBody reads a size-limited, non-empty request body.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, fmt.Errorf("api: request body is over the limit of %d bytes: %w", MaxBodyBytes, err)
		}
		return nil, fmt.Errorf("%w: %v", errBadBody, err)
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return nil, fmt.Errorf("%w: empty; send a JSON object", errBadBody)
	}
	return body, nil
}

// decode reads a size-limited body into m, refusing unknown fields.
func decode(w http.ResponseWriter, r *http.Request, m proto.Message) error {
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	if err := unmarshal.Unmarshal(body, m); err != nil {
		return fmt.Errorf("%w: %v", errBadBody, err)
	}
	return nil
}

// decodeJSON reads a size-limited JSON object into a Go struct: the one
// decoder of every JSON body (decodeStrict), refusing an empty body,
// unknown fields, values of the wrong type and trailing data.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	return decodeStrict(w, r, v, false)
}
