package agent

import (
	"fmt"
	"sync/atomic"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/messages"
)

// starting is what the agent waits for before its health is more than
// "starting": the CSI plugins it restored from its store, each until its
// instance has fingerprinted once, healthy or not (an instance that gives
// up is listed unhealthy too), or the plugin is no longer current. Until
// then the catalog counts no healthy instance of those plugins on this
// node, so a mount sent then is refused as not schedulable; an "ok" health
// said otherwise.
type starting struct {
	restored []*messages.PluginInfo // the CSI plugins current in the registry when the agent started
	done     atomic.Bool            // set once none is waited for, for good
}

// restore notes the CSI plugins current in a registry just opened.
func (s *starting) restore(current func(ptype string) []*messages.PluginInfo) {
	for _, ptype := range []string{csi.TypeController, csi.TypeNode} {
		s.restored = append(s.restored, current(ptype)...)
	}
	s.done.Store(len(s.restored) == 0)
}

// waiting returns the restored plugins that are still current (same
// allocation, per current) and whose instance has not fingerprinted yet
// (none of heard is theirs), described for a health reason.
func (s *starting) waiting(stillCurrent func(p *messages.PluginInfo) bool, heard []*messages.CSIFingerprint) []string {
	if s.done.Load() {
		return nil
	}
	type instance struct{ ptype, name, alloc string }
	spoke := make(map[instance]bool, len(heard))
	for _, fp := range heard {
		spoke[instance{fp.GetType(), fp.GetName(), fp.GetAllocId()}] = true
	}
	var out []string
	for _, p := range s.restored {
		if !spoke[instance{p.GetType(), p.GetName(), p.GetAllocId()}] && stillCurrent(p) {
			out = append(out, fmt.Sprintf("%s %s (alloc %s)", p.GetType(), p.GetName(), p.GetAllocId()))
		}
	}
	if len(out) == 0 {
		s.done.Store(true)
	}
	return out
}

// startingReasons adds the reason the agent is still starting, naming the
// restored CSI plugin instances it waits for, and says whether it is.
func (a *Agent) startingReasons(reasons []string) ([]string, bool) {
	waiting := a.starting.waiting(func(p *messages.PluginInfo) bool {
		now, ok := a.registry.Snapshot().Current(p.GetType(), p.GetName())
		return ok && now.GetAllocId() == p.GetAllocId()
	}, a.csi.Plugins())
	if len(waiting) == 0 {
		return reasons, false
	}
	reason := appendReason(nil, "restored CSI plugin instances have not fingerprinted yet", waiting)[0]
	return append(reasons, "starting: "+reason), true
}
