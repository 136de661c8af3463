package catalog

import (
	"github.com/plugvisor/plugvisor/errclass"
)

// Sentinel errors of the catalog actor and its facade besides the model's:
// the catalog refuses with the model's sentinels (model.ErrInvalid,
// model.ErrVolumeNotFound, model.ErrClaimRefused, ...), which its rules
// return. A refusal that comes from the catalog model also matches the
// model's own sentinel (say model.ErrVolumeMaxClaims behind
// model.ErrClaimRefused), on both sides of the actor boundary.
var (
	// ErrShutdown: the catalog is shut down; nothing changed.
	ErrShutdown = errclass.New(errclass.ShutDown, "catalog shut down")
)
