package discovery

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"

	"github.com/plugvisor/plugvisor/messages"
)

// handler is the actor behind one Handle: a registry subscriber that runs
// fn for each allocation of its type, once.
type handler struct {
	ptype    string
	registry *actor.PID
	fn       func(name string, plugin *messages.PluginInfo)
	log      hclog.Logger
	seen     map[regKey]bool
}

// Receive handles the registry's replay and events.
func (h *handler) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		h.seen = map[regKey]bool{}
		ctx.Send(h.registry, &messages.Subscribe{Type: h.ptype, Subscriber: ctx.Self(), Replay: true})
	case *messages.Subscribed:
		for _, p := range msg.GetCurrent() {
			h.run(p)
		}
	case *messages.PluginRegistered:
		h.run(msg.GetPlugin())
	}
}

func (h *handler) run(p *messages.PluginInfo) {
	if h.seen[regKeyOf(p)] {
		return
	}
	h.seen[regKeyOf(p)] = true
	defer func() {
		if r := recover(); r != nil {
			h.log.Error("plugin handler panicked", "plugin", p.GetName(), "alloc", p.GetAllocId(), "reason", fmt.Sprint(r))
		}
	}()
	h.fn(p.GetName(), p)
}
