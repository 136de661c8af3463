package model

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/names"
)

// Sentinel errors of the catalog's rules (RegisterOver, ClaimOn, …), which
// the catalog actor and a Fleet share: csi/catalog, csi and fleet name them
// too. Nothing changed when one is returned.
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
	// ErrStore: the durable store failed; the change was not made.
	ErrStore = errclass.New(errclass.Store, "catalog store failed")
	// ErrCorrupt: a stored record does not decode or is invalid, so the
	// catalog does not start. The error also matches storage.ErrCorrupt and
	// names the remedy, -reset-corrupt-state.
	ErrCorrupt = errclass.New(errclass.Corrupt, "catalog record corrupt")
	// ErrClaimRefused: the catalog refuses the claim (a second writer on a
	// single-writer volume, say); the error also matches the model's own
	// sentinel, such as ErrVolumeMaxClaims.
	ErrClaimRefused = errclass.New(errclass.Conflict, "claim refused")
	// ErrFleetUnavailable: in cluster mode, etcd did not answer within the
	// request timeout, so a change was refused rather than guessed; the
	// error names the endpoints. Claims are refused until etcd answers.
	ErrFleetUnavailable = errclass.New(errclass.Unavailable, "cluster-wide catalog unavailable")
	// ErrOutcomeUnknown: in cluster mode, a change was sent and no answer
	// came back in time, and its outcome could not be read back: it may
	// or may not have been applied. Sending the same request again is
	// safe (a claim by the same alloc is taken once); the error names
	// the change. It also matches ErrFleetUnavailable.
	ErrOutcomeUnknown = errclass.New(errclass.Unavailable, "outcome unknown")
	// ErrTopologyRequired: the volume has no topology, and its plugin
	// advertises VOLUME_ACCESSIBILITY_CONSTRAINTS, so each of its volumes
	// needs one (Nomad's TODO, enforced; TopologyRequiredOf); it also
	// matches ErrInvalid. Nothing changed and no RPC was sent.
	ErrTopologyRequired = errclass.New(errclass.Invalid, "topology required")
	// ErrVolumeLimit: the catalog holds as many volumes as it may (agent
	// flag -max-volumes), so a new one is refused.
	ErrVolumeLimit = errclass.New(errclass.Limit, "volume limit reached")
	// ErrNodeNotFound: the fleet knows no such node: it is not up, is not
	// draining, and holds no claim and no attachment.
	ErrNodeNotFound = errclass.New(errclass.NotFound, "node not found")
	// ErrNodeDraining: the node is draining already (a drain), or is not
	// draining (a forced free of its claims).
	ErrNodeDraining = errclass.New(errclass.Conflict, "node drain state")
)

// DefaultMaxVolumes bounds the volumes of a catalog, or of a fleet, every
// namespace together, unless configured otherwise.
const DefaultMaxVolumes = 16384

// Refusef returns an error that matches sentinel and reads
// "<sentinel>: <detail>".
func Refusef(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{sentinel}, args...)...)
}

// Refusal wraps err, an error of the model (or of names.Check), as a
// refusal that matches sentinel as well as everything err matches, and
// has err's class.
func Refusal(sentinel, err error) error {
	return errclass.Also(fmt.Errorf("%v: %w", sentinel, err), sentinel)
}

// Classify classifies an error of the model's volume operations: bad
// input is ErrInvalid; every refusal that depends on the volume's claims
// or health (a missing claim to release included) is ErrClaimRefused.
func Classify(err error) error {
	if errors.Is(err, errclass.Invalid) {
		return Refusal(ErrInvalid, err)
	}
	return Refusal(ErrClaimRefused, err)
}

// DrainRefusal is the refusal, matching ErrClaimRefused, of a new claim by
// an alloc of node, which has been draining since since.
func DrainRefusal(node string, since time.Time) error {
	return Refusef(ErrClaimRefused, "node %q is draining (since %s): it takes no new claim; plugvisor node eligibility -enable %s ends the drain",
		node, since.Format(time.RFC3339), node)
}

// VolumeKey checks a namespace (empty means the default one) and a volume
// ID, and returns the namespace to use; bad ones are ErrInvalid.
func VolumeKey(namespace, id string) (string, error) {
	namespace = cmp.Or(namespace, DefaultNamespace)
	if err := cmp.Or(names.Check("namespace", namespace), names.Check("volume ID", id)); err != nil {
		return "", Refusal(ErrInvalid, err)
	}
	return namespace, nil
}

// NotFound is the ErrVolumeNotFound error of the volume (namespace, id).
func NotFound(namespace, id string) error {
	return Refusef(ErrVolumeNotFound, "no volume %q in namespace %q", id, namespace)
}

// VolumeLimitError is the refusal, matching ErrVolumeLimit, of the new
// volume (namespace, id) by a catalog that holds held volumes, its limit:
// the catalog's, and a fleet's.
func VolumeLimitError(namespace, id string, held int) error {
	return Refusef(ErrVolumeLimit, "volume %s/%s: the catalog holds %d volumes, the limit (catalog.Config.MaxVolumes, agent flag -max-volumes); "+
		"deregister or delete volumes, or raise the limit", namespace, id, held)
}

// PluginVolumeTaken refuses, with ErrVolumeConflict naming the volume that
// holds it, a registration of v whose plugin volume (plugin, external ID)
// one of others, volumes other than v, holds: a plugin volume lives in one
// catalog volume only.
func PluginVolumeTaken(v *CSIVolume, others []*CSIVolume) error {
	for _, o := range others {
		if o.PluginID == v.PluginID && o.PluginVolumeID() == v.PluginVolumeID() {
			return Refusef(ErrVolumeConflict,
				"volume %s/%s: plugin %q volume %q is already catalog volume %q in namespace %q; a plugin volume belongs to one catalog volume only: use it there, or register another plugin volume",
				v.Namespace, v.ID, v.PluginID, v.PluginVolumeID(), o.ID, o.Namespace)
		}
	}
	return nil
}

// MaxBatch is the most volumes one batch may hold. It comes from etcd's
// default limit of 128 operations per transaction (--max-txn-ops): a
// fleet's batch transaction guards and writes at most 4 keys per volume
// (the volume, its old and new plugin volume entries, and the holder of a
// stale entry) besides the 16 count shards, and (128-16)/4 = 28; 25 leaves
// room. A node's catalog keeps the same limit, so a batch that a node takes
// a fleet takes too.
const MaxBatch = 25

// BatchItemError is err, a refusal of the item at index i (volume id) of
// a batch, naming that item; it matches everything err matches.
func BatchItemError(i int, id string, err error) error {
	return fmt.Errorf("volumes[%d] (volume %q): %w", i, id, err)
}

// CheckRegisterBatch checks a batch of registrations on its face: one to
// MaxBatch volumes, none nil, no namespace and ID twice. Each volume's own
// description is checked with it, by the registration's rules. A bad batch
// is ErrInvalid naming the field.
func CheckRegisterBatch(vs []*CSIVolume) error {
	keys := make([][2]string, len(vs))
	for i, v := range vs {
		if v == nil {
			return Refusef(ErrInvalid, "volumes[%d]: must not be null", i)
		}
		keys[i] = [2]string{cmp.Or(v.Namespace, DefaultNamespace), v.ID}
	}
	return checkBatchKeys(keys)
}

// CheckDeregisterBatch checks a batch of deregistrations of namespace on
// its face, as CheckRegisterBatch does.
func CheckDeregisterBatch(namespace string, ids []string) error {
	keys := make([][2]string, len(ids))
	for i, id := range ids {
		keys[i] = [2]string{cmp.Or(namespace, DefaultNamespace), id}
	}
	return checkBatchKeys(keys)
}

// checkBatchKeys refuses an empty batch, one over MaxBatch, and one that
// names a volume (namespace, ID) twice.
func checkBatchKeys(keys [][2]string) error {
	switch {
	case len(keys) == 0:
		return Refusef(ErrInvalid, "volumes: a batch needs at least one volume")
	case len(keys) > MaxBatch:
		return Refusef(ErrInvalid, "volumes: %d volumes in one batch, over the limit of %d (model.MaxBatch, from etcd's 128 operations per transaction); split it into batches of %d or fewer",
			len(keys), MaxBatch, MaxBatch)
	}
	seen := make(map[[2]string]int, len(keys))
	for i, key := range keys {
		if j, ok := seen[key]; ok {
			return Refusef(ErrInvalid, "volumes[%d]: volume %q in namespace %q is volumes[%d] too; a batch names each volume once",
				i, key[1], key[0], j)
		}
		seen[key] = i
	}
	return nil
}
