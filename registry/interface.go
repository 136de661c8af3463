package registry

import (
	"context"

	"github.com/plugvisor/plugvisor/messages"
)

// Interface is what the Registry facade offers its callers, as Nomad's
// dynamicplugins.Registry interface does: code that takes an Interface
// can be given a substitute in tests. Registry satisfies it; so does any
// type with these methods, which keep the Registry's contracts (writes
// return once durable, reads are of the latest durable state).
type Interface interface {
	RegisterPlugin(info *messages.PluginInfo) error
	DeregisterPlugin(ptype, name, allocID string) error
	ListPlugins(ptype string) []*messages.PluginInfo
	DispensePlugin(ptype, name string) (any, error)
	PluginForAlloc(ptype, name, allocID string) (*messages.PluginInfo, error)
	WaitForPlugin(ctx context.Context, ptype, name string) (*messages.PluginInfo, error)
	PluginsUpdatedCh(ctx context.Context, ptype string) <-chan Event
	Subscribe(ctx context.Context, ptype string, opts SubscribeOptions) (*Subscription, error)
	Shutdown() error
}

var _ Interface = (*Registry)(nil)
