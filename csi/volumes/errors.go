package volumes

import (
	"errors"
	"fmt"
	"strings"

	"github.com/plugvisor/plugvisor/errclass"
)

// Sentinel errors of the volume manager. They survive the trip through the
// actor's answers: the facade gives back errors that errors.Is matches
// against them, against the csi package's sentinels of the plugin's gRPC
// codes (csi.ErrNotFound, csi.ErrFailedPrecondition, ...), and against
// csi.ErrFleetUnavailable and csi.ErrVolumeLimit (the catalog's
// ErrFleetUnavailable and ErrVolumeLimit).
var (
	// ErrInvalid: a namespace, volume ID, alloc ID or node ID that cannot
	// be used (empty, a path separator, "..", control characters). Nothing
	// changed.
	ErrInvalid = errclass.New(errclass.Invalid, "invalid request")
	// ErrVolumeNotFound: the catalog has no such volume. Nothing changed.
	ErrVolumeNotFound = errclass.New(errclass.NotFound, "volume not found")
	// ErrPluginNotFound: the volume's csi-node plugin is not registered, so
	// nothing can be mounted. Nothing changed.
	ErrPluginNotFound = errclass.New(errclass.NotFound, "node plugin not found")
	// ErrNotMounted: the alloc has no mount of the volume on this node.
	// Nothing changed.
	ErrNotMounted = errclass.New(errclass.NotFound, "volume not mounted")
	// ErrClaimRefused: the catalog refused the claim (a second writer on a
	// single-writer volume, ...). Nothing changed.
	ErrClaimRefused = errclass.New(errclass.Conflict, "claim refused")
	// ErrInUse: the request conflicts with the volume's live publishes or
	// with an operation left unfinished (the error names them). Nothing
	// changed.
	ErrInUse = errclass.New(errclass.Conflict, "volume in use")
	// ErrTargetBusy: the plugin answered NodeUnpublishVolume but left its
	// target mounted or not empty, so the agent cannot remove it (EBUSY,
	// ENOTEMPTY). The publish stays recorded; unmount again once what holds
	// the target lets go.
	ErrTargetBusy = errclass.New(errclass.Conflict, "target busy")
	// ErrPluginChanged: the socket of a step serves another plugin (by its
	// CSI name, GetPluginInfo) than the one the volume was mounted through,
	// so the step is not sent. The record stays; start that plugin again,
	// or unmount with force to clean up the node.
	ErrPluginChanged = errclass.New(errclass.Conflict, "another plugin serves the socket")
	// ErrDeadline: the operation did not finish within its deadline. It
	// goes on, or rolls back, without the caller; the volume's status shows
	// its outcome.
	ErrDeadline = errclass.New(errclass.Deadline, "operation deadline exceeded")
	// ErrStore: the durable store failed. The operation stopped without
	// sending another RPC; the record says how far it went.
	ErrStore = errclass.New(errclass.Store, "store failed")
	// ErrCorrupt: a stored record does not decode or is invalid, so the
	// volume manager does not start.
	ErrCorrupt = errclass.New(errclass.Corrupt, "record corrupt")
	// ErrShutDown: the volume manager is shut down. Nothing changed.
	ErrShutDown = errclass.New(errclass.ShutDown, "volume manager is shut down")
	// ErrFenced: this node's lease in the fleet is not held, so it cannot
	// vouch for its claims: new mounts and claims are refused, and a
	// writer's mount stays read-only until the claim is checked (see
	// SetStanding). Retry once etcd answers.
	ErrFenced = errclass.New(errclass.Unavailable, "fenced")
)

// invalid returns an ErrInvalid error naming each problem.
func invalid(problems ...string) error {
	return fmt.Errorf("%w: %s", ErrInvalid, strings.Join(problems, "; "))
}

// catalogError adds the volume manager's sentinel of its class to an error
// of the Catalog or the Attachments, whose text already says what
// happened: a volume not found is ErrVolumeNotFound, bad input ErrInvalid,
// and a conflict with the volume's claims or state is conflict
// (ErrClaimRefused, or ErrInUse for a detach). Other errors (the fleet
// unavailable, the volume limit, a store) keep their own sentinels.
func catalogError(err, conflict error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errclass.NotFound):
		return errclass.Also(err, ErrVolumeNotFound)
	case errors.Is(err, errclass.Conflict):
		return errclass.Also(err, conflict)
	case errors.Is(err, errclass.Invalid):
		return errclass.Also(err, ErrInvalid)
	}
	return err
}
