package nomad

import (
	"cmp"
	"context"

	"github.com/hashicorp/nomad/client/dynamicplugins"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
)

// PluginsUpdatedCh returns a channel of ptype's events ("" for every
// type's) in Nomad's two kinds, in order, none dropped. It closes when ctx
// ends or the registry shuts down. A slow reader slows nobody else (Nomad's
// blocks every registration).
//
// plugvisor's three kinds map to Nomad's two:
//   - a new allocation: EventTypeRegistered;
//   - a known allocation updated while current: EventTypeRegistered again
//     (Nomad sends nothing and keeps the old info); an update to one that is
//     not current sends nothing;
//   - a removal: EventTypeDeregistered for the allocation removed, then, if
//     it was current and an older allocation remains, EventTypeRegistered
//     for that one, which is current again (Nomad's subscribers learn that
//     only at their next resync).
//
// The signature has no room for an error: a subscription plugvisor refuses
// (over registry.Limits.Subscribers, after Shutdown) is logged as an error
// and its channel delivers nothing and closes when ctx ends.
func (r *Registry) PluginsUpdatedCh(ctx context.Context, ptype string) <-chan *dynamicplugins.PluginUpdateEvent {
	out := make(chan *dynamicplugins.PluginUpdateEvent, 1)
	t, ok := "", true
	if ptype != "" {
		t, ok = encodeID(ptype)
	}
	var sub *registry.Subscription
	err := error(nil)
	if ok {
		sub, err = r.reg.Subscribe(ctx, t, registry.SubscribeOptions{MaxBacklog: r.backlog})
	}
	if err != nil {
		r.log.Error("PluginsUpdatedCh: subscription refused; the channel delivers nothing", "type", ptype, "error", err)
	}
	if sub == nil {
		context.AfterFunc(ctx, func() { close(out) })
		return out
	}
	go r.forward(ctx, t, sub, out)
	return out
}

// forward converts sub's events onto out until sub or ctx ends, then closes
// out. A reader that falls Config.Backlog events behind is
// subscribed again with a replay of the current allocations, as
// EventTypeRegistered events: what it missed of removals, a resync (the CSI
// manager's every 30s) finds.
func (r *Registry) forward(ctx context.Context, ptype string, sub *registry.Subscription, out chan<- *dynamicplugins.PluginUpdateEvent) {
	defer close(out)
	for {
		for ev := range sub.C {
			for _, e := range nomadEvents(ev) {
				select {
				case out <- e:
				case <-ctx.Done():
					return
				}
			}
		}
		if !sub.Lagged() {
			return
		}
		r.log.Warn("PluginsUpdatedCh: the reader fell behind; subscribing again with the current plugins", "type", ptype)
		// Room for the replay, or the replay itself would lag.
		backlog := max(r.backlog, 0)
		backlog = cmp.Or(backlog, registry.DefaultMaxBacklog) + len(r.reg.ListPlugins(ptype))
		var err error
		if sub, err = r.reg.Subscribe(ctx, ptype, registry.SubscribeOptions{Replay: true, MaxBacklog: backlog}); err != nil {
			r.log.Error("PluginsUpdatedCh: subscribing again failed; the channel closes", "type", ptype, "error", err)
			return
		}
	}
}

// nomadEvents maps one plugvisor event to Nomad's (see PluginsUpdatedCh).
func nomadEvents(ev registry.Event) []*dynamicplugins.PluginUpdateEvent {
	registered := func(p *messages.PluginInfo) *dynamicplugins.PluginUpdateEvent {
		return &dynamicplugins.PluginUpdateEvent{EventType: dynamicplugins.EventTypeRegistered, Info: toNomad(p)}
	}
	switch e := ev.(type) {
	case *messages.PluginRegistered:
		return []*dynamicplugins.PluginUpdateEvent{registered(e.GetPlugin())}
	case *messages.PluginUpdated:
		if e.GetIsCurrent() {
			return []*dynamicplugins.PluginUpdateEvent{registered(e.GetPlugin())}
		}
	case *messages.PluginDeregistered:
		out := []*dynamicplugins.PluginUpdateEvent{{EventType: dynamicplugins.EventTypeDeregistered, Info: toNomad(e.GetPlugin())}}
		if e.GetCurrentChanged() && e.GetCurrent() != nil {
			out = append(out, registered(e.GetCurrent()))
		}
		return out
	}
	return nil
}
