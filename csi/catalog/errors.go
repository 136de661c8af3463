package catalog

import (
	"github.com/plugvisor/plugvisor/csi/catalog/model"
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
	// ErrInvalid: the request was malformed (an empty or unsafe ID,
	// an unknown mode); nothing changed.
	ErrInvalid = model.ErrInvalid
	// ErrVolumeNotFound: no volume has that namespace and ID; nothing changed.
	ErrVolumeNotFound = model.ErrVolumeNotFound
	// ErrPluginNotFound: no node fingerprints the plugin and no expectation
	// names it; nothing changed.
	ErrPluginNotFound = model.ErrPluginNotFound
	// ErrVolumeInUse: the volume has claims, so it cannot be deregistered or
	// changed; nothing changed.
	ErrVolumeInUse = model.ErrVolumeInUse
	// ErrVolumeConflict: the plugin volume (plugin, external ID) already
	// lives in another catalog volume, which the error names; nothing changed.
	ErrVolumeConflict = model.ErrVolumeConflict
	// ErrVolumeDeleting: the volume is being deleted, so it takes no claim
	// and no new description; nothing changed.
	ErrVolumeDeleting = model.ErrVolumeDeleting
	// ErrVolumeLimit: the catalog holds Config.MaxVolumes volumes
	// (agent flag -max-volumes), so a new one is refused; nothing changed.
	// It is model.ErrVolumeLimit, which csi and the volume manager carry too.
	ErrVolumeLimit = model.ErrVolumeLimit
	// ErrTopologyRequired: the volume has no topology, and its plugin
	// advertises VOLUME_ACCESSIBILITY_CONSTRAINTS, so each of its volumes
	// needs one (Nomad's TODO, enforced); it also matches ErrInvalid.
	// Nothing changed and no RPC was sent. It is model.ErrTopologyRequired,
	// which a fleet returns too.
	ErrTopologyRequired = model.ErrTopologyRequired
	// ErrShutdown: the catalog is shut down; nothing changed.
	ErrShutdown = errclass.New(errclass.ShutDown, "catalog shut down")
	// ErrStore: the durable store failed; the change was not made.
	ErrStore = model.ErrStore
	// ErrCorrupt: a stored record does not decode or is invalid, so
	// the catalog does not start. The error also matches storage.ErrCorrupt
	// and names the remedy, -reset-corrupt-state.
	ErrCorrupt = model.ErrCorrupt
	// ErrFleetUnavailable: in cluster mode, etcd did not answer within the
	// request timeout, so the change was refused rather than guessed; the
	// error names the endpoints. Claims are refused until etcd answers. It
	// is model.ErrFleetUnavailable, which csi and the volume manager carry too.
	ErrFleetUnavailable = model.ErrFleetUnavailable
)
