// Package api serves plugvisor's HTTP JSON API (v1), which the agent serves
// on its unix socket and, optionally, on TCP. Server.HandlerFor guards the
// routes for one listener (Host header, ACL tokens, JSON writes, body
// size). Handlers are thin: they decode (decode.go: one decoder for every
// body and query parameter), call a facade (registry, CSI manager,
// catalog, volumes), and encode (render.go: protobuf messages by the same
// JSON rules as the rest). Errors are JSON {"error": "..."} with a status
// code that matches the facade's sentinel.
//
// openapi.yaml describes every route, and is served at /v1/openapi.yaml;
// the package's tests drive every route against it.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/messages"
)

// MaxBodyBytes bounds a request body.
const MaxBodyBytes = 1 << 20

// CSIPlugins gives the latest fingerprint of every CSI plugin instance.
type CSIPlugins interface {
	Plugins() []*messages.CSIFingerprint
}

// Server holds what the API serves, each part as the interface the API
// defines for it (parts.go). Registry is required; a nil CSI, Catalog,
// Volumes or Metrics turns their endpoints into 404s that say so.
type Server struct {
	Registry Registry
	CSI      CSIPlugins
	Catalog  Catalog
	Volumes  VolumeManager
	// Controller runs create, expand, delete and snapshots through the
	// plugins' controllers (api/controller.go); nil turns them into 404s.
	Controller Controller
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
	DockerVolumes DockerVolumes
	DockerPlugins DockerPlugins
	Discovery     DiscoveredPlugins
	// Fences, when set, adds the volume manager's fence events to the
	// event streams that filter no plugin type.
	VolumeEvents VolumeEventFeed
	// Limits bound the counts in a request body (api/strict.go); zero
	// fields take their defaults.
	Limits Limits
	// Fleet serves /v1/fleet/...: the agent's fleet in cluster mode; nil
	// turns those endpoints into 404s.
	Fleet FleetNodes
	// FleetPlugins serves the fleet's counts of the plugins and their
	// expected counts; nil: GET /v1/csi/plugins and /v1/csi/plugins/{name}
	// answer with this node's counts, and PUT .../expect is a 404 that
	// says so.
	FleetPlugins FleetPlugins

	// warns keeps a client's retries of a refused request from logging a
	// warning each.
	warns warnLimiter
}

// route is one endpoint: its method, its path pattern (net/http's), the
// query parameters it takes (any other is refused) and its handler.
type route struct {
	method, path string
	query        []string
	handle       func(http.ResponseWriter, *http.Request) error
}

// routes are every endpoint of the API but /metrics; each is described in
// openapi.yaml, and a test holds the two to each other.
func (s *Server) routes() []route {
	return slices.Concat([]route{
		{"GET", "/v1/health", nil, s.health},
		{"GET", "/v1/openapi.yaml", nil, serveSpec},
		{"GET", "/v1/plugins", []string{"type"}, s.listPlugins},
		{"POST", "/v1/plugins", nil, s.registerPlugin},
		{"GET", "/v1/plugins/{type}/{name}", nil, s.getPlugin},
		{"DELETE", "/v1/plugins/{type}/{name}/{alloc}", []string{"force"}, s.deregisterPlugin},
		{"GET", "/v1/events", []string{"type", "replay"}, streaming(s.events)},
		{"GET", "/v1/csi/instances", nil, s.csiInstances},
	}, s.volumeRoutes(), s.controllerRoutes(), s.dockerRoutes(), s.fleetRoutes(), s.pluginViewRoutes())
}

// Handler returns the API's routes, unguarded: serve them through
// HandlerFor, which checks each request against its listener first.
func (s *Server) Handler() http.Handler { return s.mux() }

// mux is Handler's mux: HandlerFor also asks it which route a request is
// for, to check the right that route needs.
func (s *Server) mux() *http.ServeMux {
	if s.Logger == nil {
		s.Logger = hclog.NewNullLogger()
	}
	mux := http.NewServeMux()
	handle := func(pattern string, h func(http.ResponseWriter, *http.Request) error) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if err := h(w, r); err != nil {
				s.writeError(w, r, err)
			}
		})
	}
	var paths []string
	for _, rt := range s.routes() {
		name := rt.method + " " + rt.path
		handle(name, func(w http.ResponseWriter, r *http.Request) error {
			if err := checkQuery(r.URL.RawQuery, name, rt.query); err != nil {
				return err
			}
			return rt.handle(w, r)
		})
		if !slices.Contains(paths, rt.path) {
			paths = append(paths, rt.path)
		}
	}
	if s.Metrics != nil {
		mux.Handle("GET /metrics", s.Metrics)
		paths = append(paths, "/metrics")
	}
	// Anything else: JSON 404, and JSON 405 for a known path with the
	// wrong method (the method patterns above are more specific).
	for _, path := range paths {
		handle(path, func(http.ResponseWriter, *http.Request) error { return errMethod })
	}
	handle("/", func(_ http.ResponseWriter, r *http.Request) error {
		return fmt.Errorf("%w: no such endpoint %s", errNotFound, r.URL.Path)
	})
	return mux
}

var (
	errMethod   = errclass.New(errclass.Invalid, "method not allowed")
	errNotFound = errclass.New(errclass.NotFound, "not found")
)

// statusOf maps an error to its HTTP status.
func statusOf(err error) int {
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig), errors.Is(err, errOverLimit):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, errMethod):
		return http.StatusMethodNotAllowed
	case classStatus(err) != 0:
		return classStatus(err)
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// statusClientClosed is the status of a request whose caller went away
// before its answer (nginx's 499): nobody reads it, but the log and the
// metrics tell it from a failure of the agent's.
const statusClientClosed = 499

// ErrStopping is the cause with which an embedder that stops serving
// cancels its requests' base context (http.Server.BaseContext, with
// context.WithCancelCause): a request cancelled so is answered 503, shut
// down, and not taken for one whose caller went away.
var ErrStopping = errclass.New(errclass.ShutDown, "the agent is stopping")

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	gone, err := cancelled(r, err)
	status := statusOf(err)
	if gone {
		status = statusClientClosed
	}
	// A 4xx is the caller's to fix, so it is news, not an error of the
	// agent's; a 503 is a service the agent needs that did not answer.
	switch {
	case status == statusClientClosed:
		s.Logger.Info("the caller went away before its answer", "method", r.Method, "path", r.URL.Path, "error", err)
	case status == http.StatusServiceUnavailable:
		s.warnUnavailable(r, status, err)
	case status >= 500:
		s.Logger.Error("request failed", "method", r.Method, "path", r.URL.Path, "status", status, "error", err)
	default:
		s.Logger.Info("request refused", "method", r.Method, "path", r.URL.Path, "status", status, "error", err)
	}
	writeJSON(w, status, map[string]string{"error": err.Error(), "code": errorCode(err, status)})
}

// warnUnavailable logs the 503 answer err to r at WARN, or, when r's
// path had one within warnEvery, at DEBUG (see warnLimiter).
func (s *Server) warnUnavailable(r *http.Request, status int, err error) {
	args := []any{"method", r.Method, "path", r.URL.Path, "status", status, "error", err}
	ok, held := s.warns.allow(r.Method+" "+r.URL.Path, time.Now())
	switch {
	case !ok:
		s.Logger.Debug("request failed: a service it needs did not answer", args...)
	case held > 0:
		s.Logger.Warn("request failed: a service it needs did not answer", append(args, "refused_since_last_warning", held)...)
	default:
		s.Logger.Warn("request failed: a service it needs did not answer", args...)
	}
}

// cancelled says whether err, the failure of r, came of r's caller going
// away (r's context cancelled with no cause of the server's). A cancel
// of the server's own (its base context's, e.g. with ErrStopping) is
// joined to err as its cause, whose class then gives the status.
func cancelled(r *http.Request, err error) (gone bool, _ error) {
	ctxErr := r.Context().Err()
	if ctxErr == nil || !(errors.Is(err, context.Canceled) || errors.Is(err, csi.ErrCanceled)) {
		return false, err
	}
	if cause := context.Cause(r.Context()); cause != ctxErr {
		return false, fmt.Errorf("%w: %w", cause, err)
	}
	return true, err
}

// errorCode is the code of an error answer, for a program to act on: the
// error's class in snake case ("not_found", "conflict", "unavailable",
// ...), "outcome_unknown" for a fleet change whose outcome could not be
// read back (retrying the same request is safe), and the status's name
// for an error of no class.
func errorCode(err error, status int) string {
	name := http.StatusText(status)
	switch class := errclass.Of(err); {
	case status == statusClientClosed:
		return "client_closed_request"
	case errors.Is(err, model.ErrOutcomeUnknown):
		return "outcome_unknown"
	case class != nil:
		name = class.Error()
	}
	return strings.ToLower(strings.ReplaceAll(name, " ", "_"))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
