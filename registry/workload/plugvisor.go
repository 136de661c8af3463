package workload

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
)

// Plugvisor adapts plugvisor's registry facade to Target. Subscribers are
// actors, as an agent's would be.
func Plugvisor(system *actor.ActorSystem, r *registry.Registry) Target {
	return &plugvisorTarget{system: system, r: r}
}

// PlugvisorCounting is Plugvisor for a registry whose Config.Metrics is
// counter: the target is a Batcher, and the workloads report its writes
// per batch.
func PlugvisorCounting(system *actor.ActorSystem, r *registry.Registry, counter *BatchCounter) Target {
	return &countingTarget{plugvisorTarget: plugvisorTarget{system: system, r: r}, BatchCounter: counter}
}

type plugvisorTarget struct {
	system *actor.ActorSystem
	r      *registry.Registry
}

type countingTarget struct {
	plugvisorTarget
	*BatchCounter
}

func (p *plugvisorTarget) Register(name, allocID string) error {
	return p.r.RegisterPlugin(&messages.PluginInfo{
		Type: PluginType, Name: name, AllocId: allocID,
		Connection: &messages.ConnectionInfo{SocketPath: SocketPath(allocID)},
	})
}

func (p *plugvisorTarget) Deregister(name, allocID string) error {
	return p.r.DeregisterPlugin(PluginType, name, allocID)
}

func (p *plugvisorTarget) List() int { return len(p.r.ListPlugins(PluginType)) }

func (p *plugvisorTarget) Dispense(name string) error {
	_, err := p.r.DispensePlugin(PluginType, name)
	return err
}

func (p *plugvisorTarget) Subscribe(got func()) func() {
	return p.spawn(func(ctx actor.Context) {
		if batch, ok := ctx.Message().(*registry.Events); ok {
			for range batch.Events {
				got()
			}
		}
	})
}

func (p *plugvisorTarget) SubscribeStuck() func() {
	release := make(chan struct{})
	stop := p.spawn(func(ctx actor.Context) {
		if _, ok := ctx.Message().(*registry.Events); ok {
			<-release
		}
	})
	return func() { close(release); stop() }
}

// spawn starts a subscriber actor running receive, subscribed in batches
// (one message per committed batch, as an agent's own subscribers would
// be), waits until the registry has acknowledged the subscription, and
// returns its stop.
func (p *plugvisorTarget) spawn(receive actor.ReceiveFunc) func() {
	registryPID := p.r.PID()
	subscribed := make(chan struct{})
	pid := p.system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch ctx.Message().(type) {
		case *actor.Started:
			ctx.Send(registryPID, &registry.SubscribeInBatches{
				Subscribe: &messages.Subscribe{Type: PluginType, Subscriber: ctx.Self()},
			})
		case *messages.Subscribed:
			close(subscribed)
		}
		receive(ctx)
	}))
	<-subscribed
	return func() { p.system.Root.Stop(pid) }
}
