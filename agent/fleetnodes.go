package agent

import (
	"context"
	"strconv"
	"time"

	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/fleet"
)

// fleetNodes is the fleet.Store as the API's FleetNodes: the node
// commands, their answers in the API's JSON.
type fleetNodes struct{ s *fleet.Store }

var _ api.FleetNodes = fleetNodes{}

func (f fleetNodes) Nodes(ctx context.Context) ([]api.NodeJSON, error) {
	nodes, err := f.s.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.NodeJSON, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, nodeJSON(n))
	}
	return out, nil
}

func (f fleetNodes) Drain(ctx context.Context, node string) (api.NodeJSON, error) {
	n, err := f.s.Drain(ctx, node)
	if err != nil {
		return api.NodeJSON{}, err
	}
	return nodeJSON(n), nil
}

func (f fleetNodes) Undrain(ctx context.Context, node string) (bool, error) {
	return f.s.Undrain(ctx, node)
}

func (f fleetNodes) FreeNodeClaims(ctx context.Context, node string) ([]api.FreedJSON, error) {
	freed, err := f.s.FreeNodeClaims(ctx, node)
	out := make([]api.FreedJSON, 0, len(freed))
	for _, c := range freed {
		out = append(out, api.FreedJSON{Namespace: c.Namespace, VolumeID: c.VolumeID, AllocID: c.AllocID})
	}
	return out, err
}

// nodeJSON is a node of the fleet as the API renders it.
func nodeJSON(n *fleet.Node) api.NodeJSON {
	out := api.NodeJSON{ID: n.ID, Up: n.Up, LeaseTTLSeconds: int64(n.LeaseTTL / time.Second), Draining: !n.DrainingSince.IsZero(),
		Claims: []api.NodeClaimJSON{}, Attachments: []api.NodeAttachmentJSON{}}
	if n.Lease != 0 {
		out.LeaseID = strconv.FormatInt(n.Lease, 16)
	}
	if !n.Joined.IsZero() {
		out.Joined = &n.Joined
	}
	if out.Draining {
		out.DrainingSince = &n.DrainingSince
	}
	for _, c := range n.Claims {
		out.Claims = append(out.Claims, api.NodeClaimJSON{Namespace: c.Namespace, VolumeID: c.VolumeID, AllocID: c.AllocID,
			Mode: string(c.Mode), State: string(c.State)})
	}
	for _, a := range n.Attachments {
		out.Attachments = append(out.Attachments, api.NodeAttachmentJSON{Namespace: a.Namespace, VolumeID: a.VolumeID,
			ExternalNodeID: a.ExternalNodeID, State: string(a.State)})
	}
	return out
}
