package catalog

import (
	"github.com/plugvisor/plugvisor/errclass"
)

// Sentinel errors of the catalog actor and its facade; most are the
// model's (model.ErrInvalid, …), which its rules return, besides
// ErrClaimRefused, which it shares with the volume manager: a claim or
// release that conflicts with the volume's claims or health (a second
// writer, another node, the other mode, an unschedulable volume). A refusal
// that comes from the catalog model also matches the model's own sentinel
// (say model.ErrVolumeMaxClaims behind ErrClaimRefused), on both sides of
// the actor boundary.
var (
	// ErrTopologyRequired: the volume has no topology, and its plugin
	// advertises VOLUME_ACCESSIBILITY_CONSTRAINTS, so each of its volumes
	// needs one (Nomad's TODO, enforced); it also matches model.ErrInvalid.
	// Nothing changed and no RPC was sent.
	ErrTopologyRequired = errclass.New(errclass.Invalid, "topology required")
	// ErrShutdown: the catalog is shut down; nothing changed.
	ErrShutdown = errclass.New(errclass.ShutDown, "catalog shut down")
)
