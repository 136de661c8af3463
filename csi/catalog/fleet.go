package catalog

import "github.com/plugvisor/plugvisor/csi/catalog/model"

// Fleet is the cluster-wide catalog that a node's catalog defers to in
// cluster mode (model.Fleet); it decides by the model's rules
// (model.RegisterOver, model.ClaimOn, …), as the catalog actor does.
type Fleet = model.Fleet

// BatchFleet is a Fleet that registers and deregisters batches, all or
// nothing, in one transaction (model.BatchFleet). A Fleet without it
// refuses batches.
type BatchFleet = model.BatchFleet

// Errors of a fleet's node commands (drain, eligibility, forced free).
// Nothing changed when one is returned.
var (
	// ErrNodeNotFound is model.ErrNodeNotFound: the fleet knows no such node.
	ErrNodeNotFound = model.ErrNodeNotFound
	// ErrNodeDraining is model.ErrNodeDraining: the node is draining
	// already (a drain), or is not draining (a forced free of its claims).
	ErrNodeDraining = model.ErrNodeDraining
)
