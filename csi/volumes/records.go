package volumes

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/storage"
)

// Bucket is the name of the volume manager's bucket in the agent's store.
const Bucket = "csi-volume-records"

// recordKeyPrefix starts the key of every record: volume/<namespace>/<id>.
const recordKeyPrefix = "volume/"

// The states of a record's parts. Each step of the way in writes its "-ing"
// state before its RPC and its done state after it; each step of the way
// out writes its "-ing" state before its RPC and removes the part after it.
const (
	stateClaiming     = "claiming"
	statePublishing   = "publishing"
	statePublished    = "published"
	stateUnpublishing = "unpublishing"
	stateReleasing    = "releasing"

	stateStaging   = "staging"
	stateStaged    = "staged"
	stateUnstaging = "unstaging"

	stateAttaching = "attaching"
	stateAttached  = "attached"
	stateDetaching = "detaching"
)

var (
	publishStates    = []string{stateClaiming, statePublishing, statePublished, stateUnpublishing, stateReleasing}
	stageStates      = []string{stateStaging, stateStaged, stateUnstaging}
	attachmentStates = []string{stateAttaching, stateAttached, stateDetaching}
)

// volumeKey is a catalog volume: (namespace, id).
type volumeKey struct {
	namespace, id string
}

func (k volumeKey) String() string { return k.namespace + "/" + k.id }

// storageKey is the record's key in the bucket. Namespaces and IDs hold no
// "/" (checkID), so the key is unambiguous.
func (k volumeKey) storageKey() []byte {
	return []byte(recordKeyPrefix + k.namespace + "/" + k.id)
}

func keyOf(rec *messages.VolumeRecord) volumeKey {
	return volumeKey{rec.GetNamespace(), rec.GetVolumeId()}
}

// recordEmpty reports whether rec holds nothing on the node: no attachment,
// no stage, no publish. An empty record is deleted, not stored.
func recordEmpty(rec *messages.VolumeRecord) bool {
	return holdsNothing(rec) && rec.GetPendingExpandBytes() == 0
}

// holdsNothing reports whether rec has nothing attached, staged or
// published on this node (it may still hold a pending node expansion).
func holdsNothing(rec *messages.VolumeRecord) bool {
	return rec.GetAttachment() == nil && rec.GetStage() == nil && len(rec.GetPublishes()) == 0
}

// recordOp is the store op that makes rec durable: a put, or a delete when
// rec is empty.
func recordOp(key volumeKey, rec *messages.VolumeRecord) (storage.Op, error) {
	if rec == nil || recordEmpty(rec) {
		return storage.Delete(key.storageKey()), nil
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(rec)
	if err != nil {
		return storage.Op{}, fmt.Errorf("%w: encode record of %s: %w", ErrStore, key, err)
	}
	return storage.Put(key.storageKey(), b), nil
}

// loadRecords reads every record of bucket. A record that does not decode,
// or whose content is not one the volume manager writes, is ErrCorrupt:
// the manager never starts forgetting what is mounted.
func loadRecords(bucket storage.Bucket) (map[volumeKey]*messages.VolumeRecord, error) {
	out := map[volumeKey]*messages.VolumeRecord{}
	err := bucket.Load(func(k, v []byte) error {
		rec := &messages.VolumeRecord{}
		if err := proto.Unmarshal(v, rec); err != nil {
			return fmt.Errorf("%w: key %q: %w", ErrCorrupt, k, err)
		}
		if err := checkRecord(rec); err != nil {
			return fmt.Errorf("%w: key %q: %w", ErrCorrupt, k, err)
		}
		key := keyOf(rec)
		if string(key.storageKey()) != string(k) {
			return fmt.Errorf("%w: key %q holds the record of %s", ErrCorrupt, k, key)
		}
		out[key] = rec
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// checkRecord says what is wrong with a loaded record, if anything.
func checkRecord(rec *messages.VolumeRecord) error {
	var problems []string
	for _, err := range []error{
		checkID("namespace", rec.GetNamespace()), checkID("volume ID", rec.GetVolumeId()),
		checkID("plugin ID", rec.GetPluginId()),
	} {
		if err != nil {
			problems = append(problems, err.Error())
		}
	}
	if rec.GetExternalId() == "" {
		problems = append(problems, "external ID is empty")
	}
	if a := rec.GetAttachment(); a != nil && !slices.Contains(attachmentStates, a.GetState()) {
		problems = append(problems, fmt.Sprintf("attachment state %q is unknown", a.GetState()))
	}
	if s := rec.GetStage(); s != nil && !slices.Contains(stageStates, s.GetState()) {
		problems = append(problems, fmt.Sprintf("stage state %q is unknown", s.GetState()))
	}
	for alloc, p := range rec.GetPublishes() {
		if checkID("alloc ID", alloc) != nil || p.GetAllocId() != alloc {
			problems = append(problems, fmt.Sprintf("publish of alloc %q is filed under %q", p.GetAllocId(), alloc))
		}
		if !slices.Contains(publishStates, p.GetState()) {
			problems = append(problems, fmt.Sprintf("publish state %q of alloc %q is unknown", p.GetState(), alloc))
		}
	}
	if recordEmpty(rec) {
		problems = append(problems, "record holds nothing")
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return nil
}

// otherPublishes returns, sorted, the allocs other than alloc with a
// publish record of rec in any state: each is live for the rules that
// decide unstaging and detaching.
func otherPublishes(rec *messages.VolumeRecord, alloc string) []string {
	var out []string
	for a := range rec.GetPublishes() {
		if a != alloc {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out
}

// publishedAllocs returns, sorted, every alloc with a publish record.
func publishedAllocs(rec *messages.VolumeRecord) []string {
	return otherPublishes(rec, "")
}
