package table

import (
	"unsafe"

	"github.com/plugvisor/plugvisor/messages"
)

// Allocation is one registered copy of a plugin. Its PluginInfo and
// ConnectionInfo are inline: one heap object of 224 bytes, a Go size
// class. A pointer to them and a second sequence made it 240.
//
// An Allocation in a table is immutable. A change makes a new Allocation
// with the same order.
type Allocation struct {
	plugin messages.PluginInfo
	// conn is plugin.Connection's when the plugin has a connection
	// (copyInto).
	conn messages.ConnectionInfo
	// ord is the order (see Order). updatedBit is set on an Allocation
	// made as an updatedAllocation.
	ord uint64
}

// updatedAllocation is an Allocation whose changed sequence differs from
// its order: one that an update replaced. Most allocations are never
// updated, and keep no second sequence.
type updatedAllocation struct {
	Allocation
	changed uint64
}

// updatedBit marks, in Allocation.ord, an Allocation that is the first
// field of an updatedAllocation. Every Allocation with it set came from
// NewAllocation. Sequences never reach it: the registry loads and hands
// out no sequence beyond MaxSequence, and search keys (borrowKey) take at
// most MaxSequence too.
const updatedBit = 1 << 63

// MaxSequence is the last sequence number, and the highest order.
const MaxSequence = updatedBit - 1

// NewAllocation copies p into a new Allocation with order and changed.
func NewAllocation(p *messages.PluginInfo, order, changed uint64) *Allocation {
	var a *Allocation
	if changed == order {
		a = &Allocation{ord: order}
	} else {
		u := &updatedAllocation{changed: changed}
		u.ord = order | updatedBit
		a = &u.Allocation
	}
	copyInto(a, p)
	return a
}

// SetOrder sets the order of a copy made by Copy, which no table holds
// yet, and returns it. Its changed sequence is then its order too. order
// is at most MaxSequence.
func (a *Allocation) SetOrder(order uint64) *Allocation {
	a.ord = order
	return a
}

// Info is the Allocation's PluginInfo, as readers and events hand it out.
// It is shared: nobody may change it.
func (a *Allocation) Info() *messages.PluginInfo { return &a.plugin }

// Order is the registration's place in time. The highest order of a name
// is current. It is persisted, so a restart keeps it.
func (a *Allocation) Order() uint64 { return a.ord &^ updatedBit }

// Changed is the sequence of the last event that changed the Allocation:
// its order, or a later update's. Replay reports it, and it is persisted
// too.
func (a *Allocation) Changed() uint64 {
	if a.ord&updatedBit == 0 {
		return a.ord
	}
	// a is the first field of an updatedAllocation (NewAllocation), so
	// the pointer is that object's too.
	return (*updatedAllocation)(unsafe.Pointer(a)).changed
}
