package registry

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry/internal/plain"
	"github.com/plugvisor/plugvisor/registry/internal/table"
	"github.com/plugvisor/plugvisor/storage"
)

// write is one command on its way to disk: from the facade, with done and
// its validation and encoding already done by the caller, or from an
// actor, with replyTo.
type write struct {
	deregister bool
	plugin     *messages.PluginInfo // register: the allocation
	held       *table.Allocation    // register from the facade: plugin's copy, to keep
	ptype      string
	name       string // deregister
	allocID    string // deregister
	record     []byte // register: the plugin field of its record (encodePlugin)
	checked    bool   // validated, and record made

	replyTo *actor.PID // an actor's command
	done    chan error // a facade call's answer
	arrived time.Time  // when the actor took it
	event   Event      // nil when the command changed nothing
	op      storage.Op // the change, when event is not nil
	err     error      // a refusal decided against the working state
	// gone is what applying the command did to the actor's gone, for a
	// rollback to undo: a register took goneOrder back from it, or a
	// deregister remembered its allocation's order in it.
	gone      goneChange
	goneOrder uint64

	// A facade call waiting for its answer is linked in its inbox's calls,
	// put there in epoch; these belong to the inbox's lock. claimed is the
	// actor's: it took the call off that list to answer it (inbox.claim).
	prev, next *write
	linked     bool
	epoch      uint64
	claimed    bool
}

// check validates w and, for a store that takes records, encodes its
// record. The facade's callers run it before handing w over; the actor
// runs it for commands sent to its PID.
func (w *write) check(encode bool) error {
	if w.deregister {
		return validateDeregister(w.ptype, w.name, w.allocID)
	}
	if err := validatePlugin(w.plugin); err != nil {
		return err
	}
	w.ptype = w.plugin.GetType()
	if encode {
		w.record = encodePlugin(w.plugin)
	}
	w.checked = true
	return nil
}

// keep returns the allocation to keep for the registration w, with order
// and changed: the facade's copy (held) for a new allocation, else a new
// copy (an update, which keeps its changed sequence, or an actor's
// command). It is not yet in any table.
func (w *write) keep(order, changed uint64) *table.Allocation {
	if a := w.held; a != nil && changed == order {
		return a.SetOrder(order)
	}
	return table.NewAllocation(w.plugin, order, changed)
}

func validateDeregister(ptype, name, allocID string) error {
	if plain.ID(ptype) && plain.ID(name) && plain.ID(allocID) {
		return nil
	}
	for _, err := range []error{
		ValidateID("plugin type", ptype),
		ValidateID("plugin name", name),
		ValidateID("alloc ID", allocID),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// goneChange is what a write did to the actor's gone.Set (see write.gone).
type goneChange uint8

const (
	goneUntouched  goneChange = iota
	goneTaken                 // a registration took its order back
	goneRemembered            // a deregistration was remembered
)
