package catalog

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
)

// Sentinel errors of the catalog actor and its facade, besides
// ErrClaimRefused, which it shares with the volume manager: a claim or
// release that conflicts with the volume's claims or health (a second
// writer, another node, the other mode, an unschedulable volume). A refusal
// that comes from the catalog model also matches the model's own sentinel
// (say model.ErrVolumeMaxClaims behind ErrClaimRefused), on both sides of
// the actor boundary.
var (
	// ErrCatalogInvalid: the request was malformed (an empty or unsafe ID,
	// an unknown mode); nothing changed.
	ErrCatalogInvalid = errors.New("invalid catalog request")
	// ErrVolumeNotFound: no volume has that namespace and ID; nothing changed.
	ErrVolumeNotFound = errors.New("volume not found")
	// ErrVolumeInUse: the volume has claims, so it cannot be deregistered or
	// changed; nothing changed.
	ErrVolumeInUse = errors.New("volume in use")
	// ErrVolumeConflict: the plugin volume (plugin, external ID) already
	// lives in another catalog volume, which the error names; nothing changed.
	ErrVolumeConflict = errors.New("plugin volume already in the catalog")
	// ErrVolumeDeleting: the volume is being deleted, so it takes no claim
	// and no new description; nothing changed.
	ErrVolumeDeleting = errors.New("volume is being deleted")
	// ErrVolumeLimit: the catalog holds CatalogConfig.MaxVolumes volumes
	// (agent flag -max-volumes), so a new one is refused; nothing changed.
	// It is csi.ErrVolumeLimit, which the volume manager carries too.
	ErrVolumeLimit = csi.ErrVolumeLimit
	// ErrTopologyRequired: the volume has no topology, and its plugin
	// advertises VOLUME_ACCESSIBILITY_CONSTRAINTS, so each of its volumes
	// needs one (Nomad's TODO, enforced); it also matches
	// ErrCatalogInvalid. Nothing changed and no RPC was sent.
	ErrTopologyRequired = errors.New("topology required")
	// ErrCatalogShutdown: the catalog is shut down; nothing changed.
	ErrCatalogShutdown = errors.New("catalog shut down")
	// ErrCatalogStore: the durable store failed; the change was not made.
	ErrCatalogStore = errors.New("catalog store failed")
	// ErrCatalogCorrupt: a stored record does not decode or is invalid, so
	// the catalog does not start. The error also matches storage.ErrCorrupt
	// and names the remedy, -reset-corrupt-state.
	ErrCatalogCorrupt = errors.New("catalog record corrupt")
	// ErrFleetUnavailable: in cluster mode, etcd did not answer within the
	// request timeout, so the change was refused rather than guessed; the
	// error names the endpoints. Claims are refused until etcd answers. It
	// is csi.ErrFleetUnavailable, which the volume manager carries too.
	ErrFleetUnavailable = csi.ErrFleetUnavailable
)

// catalogSentinels pairs each sentinel of the catalog actor with its wire code.
var catalogSentinels = []struct {
	err  error
	code messages.ErrorCode
}{
	{ErrCatalogInvalid, messages.ErrorCode_ERROR_CODE_INVALID_ARGUMENT},
	{ErrTopologyRequired, messages.ErrorCode_ERROR_CODE_INVALID_ARGUMENT},
	{ErrVolumeNotFound, messages.ErrorCode_ERROR_CODE_NOT_FOUND},
	{ErrVolumeInUse, messages.ErrorCode_ERROR_CODE_CONFLICT},
	{ErrVolumeConflict, messages.ErrorCode_ERROR_CODE_CONFLICT},
	{ErrVolumeDeleting, messages.ErrorCode_ERROR_CODE_CONFLICT},
	{csi.ErrClaimRefused, messages.ErrorCode_ERROR_CODE_CONFLICT},
	{ErrVolumeLimit, messages.ErrorCode_ERROR_CODE_LIMIT},
	{ErrCatalogShutdown, messages.ErrorCode_ERROR_CODE_SHUT_DOWN},
	{ErrCatalogStore, messages.ErrorCode_ERROR_CODE_STORE},
	{ErrCatalogCorrupt, messages.ErrorCode_ERROR_CODE_UNSPECIFIED},
	{ErrFleetUnavailable, messages.ErrorCode_ERROR_CODE_UNAVAILABLE},
}

// catalogError is an error of the catalog: its text is the whole message,
// and errors.Is matches each of its kinds.
type catalogError struct {
	text  string
	kinds []error
}

func (e *catalogError) Error() string   { return e.text }
func (e *catalogError) Unwrap() []error { return e.kinds }

// catalogErrorf returns an error matching sentinel that reads
// "csi: catalog: <sentinel>: <detail>".
func catalogErrorf(sentinel error, format string, args ...any) error {
	return &catalogError{
		text:  fmt.Sprintf("csi: catalog: %v: %s", sentinel, fmt.Sprintf(format, args...)),
		kinds: []error{sentinel},
	}
}

// catalogWrap wraps err, an error of the catalog model (or of
// names.Check), as an error of the catalog that matches sentinel as
// well as everything err matches.
func catalogWrap(sentinel, err error) error {
	detail := strings.TrimPrefix(err.Error(), "catalog: ")
	return &catalogError{text: fmt.Sprintf("csi: catalog: %v: %s", sentinel, detail), kinds: []error{sentinel, err}}
}

// catalogModelError classifies an error of the catalog model: bad input is
// ErrCatalogInvalid; every refusal that depends on the volume's claims or
// health (a missing claim to release included) is ErrClaimRefused.
func catalogModelError(err error) error {
	for _, bad := range []error{
		model.ErrUnknownAccessMode, model.ErrUnknownAttachmentMode, model.ErrUnknownClaimMode,
		model.ErrUnknownClaimState, model.ErrUnknownPluginType, model.ErrInvalidVolume,
		model.ErrInvalidClaim, model.ErrInvalidPlugin, model.ErrPluginMismatch, model.ErrInvalidAttachment,
	} {
		if errors.Is(err, bad) {
			return catalogWrap(ErrCatalogInvalid, err)
		}
	}
	return catalogWrap(csi.ErrClaimRefused, err)
}

// catalogKnownErrors are the sentinels a catalog error can match across the wire.
func catalogKnownErrors() []error {
	known := make([]error, 0, len(catalogSentinels)+16)
	for _, s := range catalogSentinels {
		known = append(known, s.err)
	}
	return append(known, model.Sentinels()...)
}

// catalogErrorToProto turns an error of the catalog into the error of an
// answer; nil stays nil.
func catalogErrorToProto(err error) *messages.CatalogError {
	if err == nil {
		return nil
	}
	out := &messages.CatalogError{Message: err.Error()}
	for _, s := range catalogSentinels {
		if errors.Is(err, s.err) {
			out.Code = s.code
			break
		}
	}
	for _, known := range catalogKnownErrors() {
		if errors.Is(err, known) {
			out.Kinds = append(out.Kinds, known.Error())
		}
	}
	return out
}

// CatalogErrorFromProto turns the error of a catalog answer back into an
// error that errors.Is matches against the sentinels it matched before the
// trip (the csi package's and the catalog model's); nil stays nil. Actors
// that talk to the catalog by message use it on the answers.
func CatalogErrorFromProto(m *messages.CatalogError) error {
	if m == nil {
		return nil
	}
	e := &catalogError{text: m.GetMessage()}
	for _, known := range catalogKnownErrors() {
		if slices.Contains(m.GetKinds(), known.Error()) {
			e.kinds = append(e.kinds, known)
		}
	}
	return e
}

// CatalogErrorToProto turns an error of the catalog into the error of an
// answer, for the actors that answer for the catalog elsewhere (the volume
// grains of a fleet); nil stays nil. CatalogErrorFromProto undoes it.
func CatalogErrorToProto(err error) *messages.CatalogError { return catalogErrorToProto(err) }
