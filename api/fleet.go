package api

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// FleetNodes are the node commands of a fleet (cluster mode), as the
// agent offers them from its fleet.Store. Refusals match
// model.ErrNodeNotFound, model.ErrNodeDraining or
// model.ErrInvalid.
type FleetNodes interface {
	// Nodes lists every node the fleet knows, sorted by ID.
	Nodes(ctx context.Context) ([]NodeJSON, error)
	// Drain begins a drain of node and returns it.
	Drain(ctx context.Context, node string) (NodeJSON, error)
	// Undrain ends a drain of node, and says whether it was draining.
	Undrain(ctx context.Context, node string) (bool, error)
	// FreeNodeClaims frees the claims of a draining node's allocs.
	FreeNodeClaims(ctx context.Context, node string) ([]FreedJSON, error)
}

// NodeJSON is a node of the fleet: GET /v1/fleet/nodes.
type NodeJSON struct {
	ID string `json:"id"`
	Up bool   `json:"up"`
	// LeaseID is the node's lease in hex ("" while down), LeaseTTLSeconds
	// what is left of it.
	LeaseID         string     `json:"lease_id"`
	LeaseTTLSeconds int64      `json:"lease_ttl_seconds"`
	Joined          *time.Time `json:"joined,omitempty"`
	// Draining is true from a drain on; DrainingSince says when it began.
	Draining      bool                 `json:"draining"`
	DrainingSince *time.Time           `json:"draining_since,omitempty"`
	Claims        []NodeClaimJSON      `json:"claims"`
	Attachments   []NodeAttachmentJSON `json:"attachments"`
}

// NodeClaimJSON is a claim of an alloc of a node.
type NodeClaimJSON struct {
	Namespace string `json:"namespace"`
	VolumeID  string `json:"volume_id"`
	AllocID   string `json:"alloc_id"`
	Mode      string `json:"mode"`
	State     string `json:"state"`
}

// FreedJSON is a claim freed by force: POST /v1/fleet/nodes/{node}/free-claims.
type FreedJSON struct {
	Namespace string `json:"namespace"`
	VolumeID  string `json:"volume_id"`
	AllocID   string `json:"alloc_id"`
}

// NodeAttachmentJSON is a volume attached to a node.
type NodeAttachmentJSON struct {
	Namespace      string `json:"namespace"`
	VolumeID       string `json:"volume_id"`
	ExternalNodeID string `json:"external_node_id"`
	State          string `json:"state"`
}

func (s *Server) fleetRoutes() []route {
	return []route{
		{"GET", "/v1/fleet/nodes", nil, s.listNodes},
		{"POST", "/v1/fleet/nodes/{node}/drain", nil, s.drainNode},
		{"POST", "/v1/fleet/nodes/{node}/eligible", nil, s.undrainNode},
		{"POST", "/v1/fleet/nodes/{node}/free-claims", nil, s.freeNodeClaims},
	}
}

func (s *Server) needFleet() error {
	if s.Fleet == nil {
		return fmt.Errorf("%w: this agent is not in a fleet (start it with -cluster-etcd)", errNotFound)
	}
	return nil
}

func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) error {
	if err := s.needFleet(); err != nil {
		return err
	}
	nodes, err := s.Fleet.Nodes(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"nodes": append([]NodeJSON{}, nodes...)})
	return nil
}

// nodeCommand checks an agent in a fleet and a body that is empty or {}.
func (s *Server) nodeCommand(w http.ResponseWriter, r *http.Request) error {
	if err := s.needFleet(); err != nil {
		return err
	}
	var body struct{}
	return decodeBody(w, r, &body, true)
}

func (s *Server) drainNode(w http.ResponseWriter, r *http.Request) error {
	if err := s.nodeCommand(w, r); err != nil {
		return err
	}
	n, err := s.Fleet.Drain(r.Context(), r.PathValue("node"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, n)
	return nil
}

func (s *Server) undrainNode(w http.ResponseWriter, r *http.Request) error {
	if err := s.nodeCommand(w, r); err != nil {
		return err
	}
	node := r.PathValue("node")
	was, err := s.Fleet.Undrain(r.Context(), node)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"node_id": node, "was_draining": was})
	return nil
}

func (s *Server) freeNodeClaims(w http.ResponseWriter, r *http.Request) error {
	if err := s.nodeCommand(w, r); err != nil {
		return err
	}
	node := r.PathValue("node")
	freed, err := s.Fleet.FreeNodeClaims(r.Context(), node)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"node_id": node, "freed": append([]FreedJSON{}, freed...)})
	return nil
}
