package catalog

import (
	"errors"
	"fmt"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/errclass"
)

// Sentinel errors of the catalog actor and its facade, besides
// ErrClaimRefused, which it shares with the volume manager: a claim or
// release that conflicts with the volume's claims or health (a second
// writer, another node, the other mode, an unschedulable volume). A refusal
// that comes from the catalog model also matches the model's own sentinel
// (say model.ErrVolumeMaxClaims behind ErrClaimRefused), on both sides of
// the actor boundary.
var (
	// ErrInvalid: the request was malformed (an empty or unsafe ID,
	// an unknown mode); nothing changed.
	ErrInvalid = errclass.New(errclass.Invalid, "invalid catalog request")
	// ErrVolumeNotFound: no volume has that namespace and ID; nothing changed.
	ErrVolumeNotFound = errclass.New(errclass.NotFound, "volume not found")
	// ErrPluginNotFound: no node fingerprints the plugin and no expectation
	// names it; nothing changed.
	ErrPluginNotFound = errclass.New(errclass.NotFound, "plugin not found")
	// ErrVolumeInUse: the volume has claims, so it cannot be deregistered or
	// changed; nothing changed.
	ErrVolumeInUse = errclass.New(errclass.Conflict, "volume in use")
	// ErrVolumeConflict: the plugin volume (plugin, external ID) already
	// lives in another catalog volume, which the error names; nothing changed.
	ErrVolumeConflict = errclass.New(errclass.Conflict, "plugin volume already in the catalog")
	// ErrVolumeDeleting: the volume is being deleted, so it takes no claim
	// and no new description; nothing changed.
	ErrVolumeDeleting = errclass.New(errclass.Conflict, "volume is being deleted")
	// ErrVolumeLimit: the catalog holds Config.MaxVolumes volumes
	// (agent flag -max-volumes), so a new one is refused; nothing changed.
	// It is csi.ErrVolumeLimit, which the volume manager carries too.
	ErrVolumeLimit = csi.ErrVolumeLimit
	// ErrTopologyRequired: the volume has no topology, and its plugin
	// advertises VOLUME_ACCESSIBILITY_CONSTRAINTS, so each of its volumes
	// needs one (Nomad's TODO, enforced); it also matches ErrInvalid.
	// Nothing changed and no RPC was sent.
	ErrTopologyRequired = errclass.New(errclass.Invalid, "topology required")
	// ErrShutdown: the catalog is shut down; nothing changed.
	ErrShutdown = errclass.New(errclass.ShutDown, "catalog shut down")
	// ErrStore: the durable store failed; the change was not made.
	ErrStore = errclass.New(errclass.Store, "catalog store failed")
	// ErrCorrupt: a stored record does not decode or is invalid, so
	// the catalog does not start. The error also matches storage.ErrCorrupt
	// and names the remedy, -reset-corrupt-state.
	ErrCorrupt = errclass.New(errclass.Corrupt, "catalog record corrupt")
	// ErrFleetUnavailable: in cluster mode, etcd did not answer within the
	// request timeout, so the change was refused rather than guessed; the
	// error names the endpoints. Claims are refused until etcd answers. It
	// is csi.ErrFleetUnavailable, which the volume manager carries too.
	ErrFleetUnavailable = csi.ErrFleetUnavailable
)

// catalogError is an error of the catalog: its text is the whole message,
// and errors.Is matches each of its kinds; the first gives its class.
type catalogError struct {
	text  string
	kinds []error
}

func (e *catalogError) Error() string   { return e.text }
func (e *catalogError) Unwrap() []error { return e.kinds }

// catalogErrorf returns an error matching sentinel that reads
// "<sentinel>: <detail>".
func catalogErrorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{sentinel}, args...)...)
}

// catalogWrap wraps err, an error of the catalog model (or of
// names.Check), as an error of the catalog that matches sentinel as
// well as everything err matches, and has err's class.
func catalogWrap(sentinel, err error) error {
	return &catalogError{text: fmt.Sprintf("%v: %s", sentinel, err), kinds: []error{err, sentinel}}
}

// catalogModelError classifies an error of the catalog model: bad input is
// ErrInvalid; every refusal that depends on the volume's claims or
// health (a missing claim to release included) is ErrClaimRefused.
func catalogModelError(err error) error {
	if errors.Is(err, errclass.Invalid) {
		return catalogWrap(ErrInvalid, err)
	}
	return catalogWrap(csi.ErrClaimRefused, err)
}
