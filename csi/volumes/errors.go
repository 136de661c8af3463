package volumes

import (
	"errors"
	"fmt"
	"strings"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/messages"
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
	ErrInvalid = errors.New("volumes: invalid request")
	// ErrVolumeNotFound: the catalog has no such volume. Nothing changed.
	ErrVolumeNotFound = errors.New("volumes: volume not found")
	// ErrPluginNotFound: the volume's csi-node plugin is not registered, so
	// nothing can be mounted. Nothing changed.
	ErrPluginNotFound = errors.New("volumes: node plugin not found")
	// ErrNotMounted: the alloc has no mount of the volume on this node.
	// Nothing changed.
	ErrNotMounted = errors.New("volumes: volume not mounted")
	// ErrClaimRefused: the catalog refused the claim (a second writer on a
	// single-writer volume, ...). Nothing changed.
	ErrClaimRefused = errors.New("volumes: claim refused")
	// ErrInUse: the request conflicts with the volume's live publishes or
	// with an operation left unfinished (the error names them). Nothing
	// changed.
	ErrInUse = errors.New("volumes: volume in use")
	// ErrTargetBusy: the plugin answered NodeUnpublishVolume but left its
	// target mounted or not empty, so the agent cannot remove it (EBUSY,
	// ENOTEMPTY). The publish stays recorded; unmount again once what holds
	// the target lets go.
	ErrTargetBusy = errors.New("volumes: target busy")
	// ErrDeadline: the operation did not finish within its deadline. It
	// goes on, or rolls back, without the caller; the volume's status shows
	// its outcome.
	ErrDeadline = errors.New("volumes: operation deadline exceeded")
	// ErrStore: the durable store failed. The operation stopped without
	// sending another RPC; the record says how far it went.
	ErrStore = errors.New("volumes: store failed")
	// ErrCorrupt: a stored record does not decode or is invalid, so the
	// volume manager does not start.
	ErrCorrupt = errors.New("volumes: record corrupt")
	// ErrShutDown: the volume manager is shut down. Nothing changed.
	ErrShutDown = errors.New("volumes: volume manager is shut down")
	// ErrFenced: this node's lease in the fleet is not held, so it cannot
	// vouch for its claims: new mounts and claims are refused, and a
	// writer's mount stays read-only until the claim is checked (see
	// SetStanding). Retry once etcd answers.
	ErrFenced = errors.New("volumes: fenced")
)

// errorKinds names every sentinel that crosses the actor boundary.
var errorKinds = []struct {
	kind string
	err  error
}{
	{"invalid", ErrInvalid},
	{"volume_not_found", ErrVolumeNotFound},
	{"plugin_not_found", ErrPluginNotFound},
	{"not_mounted", ErrNotMounted},
	{"claim_refused", ErrClaimRefused},
	{"in_use", ErrInUse},
	{"target_busy", ErrTargetBusy},
	{"deadline", ErrDeadline},
	{"store", ErrStore},
	{"shut_down", ErrShutDown},
	{"fenced", ErrFenced},
	{"csi_invalid_argument", csi.ErrInvalidArgument},
	{"csi_deadline_exceeded", csi.ErrDeadlineExceeded},
	{"csi_not_found", csi.ErrNotFound},
	{"csi_already_exists", csi.ErrAlreadyExists},
	{"csi_permission_denied", csi.ErrPermissionDenied},
	{"csi_resource_exhausted", csi.ErrResourceExhausted},
	{"csi_failed_precondition", csi.ErrFailedPrecondition},
	{"csi_aborted", csi.ErrAborted},
	{"csi_out_of_range", csi.ErrOutOfRange},
	{"csi_unimplemented", csi.ErrUnimplemented},
	{"csi_internal", csi.ErrInternal},
	{"csi_unavailable", csi.ErrUnavailable},
	{"csi_unknown", csi.ErrUnknown},
	{"csi_connect", csi.ErrConnect},
	{"csi_canceled", csi.ErrCanceled},
	{"csi_data_loss", csi.ErrDataLoss},
	{"csi_unauthenticated", csi.ErrUnauthenticated},
	{"csi_invalid_response", csi.ErrInvalidResponse},
	{"csi_closed", csi.ErrClosed},
	{"fleet_unavailable", csi.ErrFleetUnavailable},
	{"volume_limit", csi.ErrVolumeLimit},
}

// errorToProto turns err into the VolumeError of an answer; nil stays nil.
func errorToProto(err error) *messages.VolumeError {
	if err == nil {
		return nil
	}
	out := &messages.VolumeError{Message: err.Error()}
	for _, k := range errorKinds {
		if errors.Is(err, k.err) {
			out.Kinds = append(out.Kinds, k.kind)
		}
	}
	return out
}

// errorFromProto turns the VolumeError of an answer back into an error
// matching the sentinels it names; nil stays nil.
func errorFromProto(e *messages.VolumeError) error {
	if e == nil {
		return nil
	}
	out := &remoteError{text: e.GetMessage()}
	for _, kind := range e.GetKinds() {
		for _, k := range errorKinds {
			if k.kind == kind {
				out.kinds = append(out.kinds, k.err)
			}
		}
	}
	return out
}

// remoteError is an error that came back from the actor: its text is the
// actor's, and errors.Is matches each of its sentinels.
type remoteError struct {
	text  string
	kinds []error
}

func (e *remoteError) Error() string   { return e.text }
func (e *remoteError) Unwrap() []error { return e.kinds }

// invalid returns an ErrInvalid error naming each problem.
func invalid(problems ...string) error {
	return fmt.Errorf("%w: %s", ErrInvalid, strings.Join(problems, "; "))
}
