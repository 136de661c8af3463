package manager

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/plugvisor/plugvisor/messages"
)

// A takeover (a newer allocation registered, or the same one at a new
// socket) stops the old instance at once, and its final fingerprint
// ("plugin instance stopped", replaced_by the new allocation) is ready
// before the new instance has dialled its plugin and fingerprinted it.
// Published then, it told the catalog that the node had no healthy
// instance of the plugin, and every claim in that window was refused,
// though the plugin was served all along. So the manager holds back the
// final words of replaced instances until the instance that took over has
// spoken (its first fingerprint, healthy or not), or has stopped or failed
// without a word, and publishes them right after. The catalog takes a
// final word that comes after the new instance's first as a late word
// and keeps the new one's.
//
// A held word is lost with the manager's state when it restarts after a
// panic; the new instance's fingerprints then stand alone, as after any
// restart.

// pluginKey names a plugin: its type and name.
type pluginKey struct{ ptype, name string }

// heldWord is a fingerprint held back, with the one its instance reported
// before it, for the health change.
type heldWord struct {
	prev, fp *messages.CSIFingerprint
}

// hold keeps fp back, and reports whether it did: fp is the final word of
// an instance that another took over, which has not spoken yet.
func (a *managerActor) hold(prev, fp *messages.CSIFingerprint) bool {
	k := pluginKey{fp.GetType(), fp.GetName()}
	if fp.GetReplacedBy() == "" || a.instances.Serving(k.ptype, k.name) == nil {
		return false
	}
	if _, spoken := a.listed.Get(&messages.CSIFingerprint{Type: k.ptype, Name: k.name}); spoken {
		return false
	}
	a.held[k] = append(a.held[k], heldWord{prev: prev, fp: fp})
	return true
}

// release publishes the words held back for plugin (ptype, name), in the
// order they came.
func (a *managerActor) release(ctx actor.Context, ptype, name string) {
	k := pluginKey{ptype, name}
	words := a.held[k]
	delete(a.held, k)
	for _, w := range words {
		a.publish(ctx, w.prev, w.fp, false)
	}
}
