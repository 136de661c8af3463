package workload

import (
	"context"
	"math"

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

// PlugvisorChannels is PlugvisorCounting with subscribers that are Go
// channels (Registry.Subscribe), each drained by a goroutine of its own,
// as a program that is not an actor would subscribe.
func PlugvisorChannels(system *actor.ActorSystem, r *registry.Registry, counter *BatchCounter) Target {
	return &channelTarget{countingTarget: countingTarget{plugvisorTarget: plugvisorTarget{system: system, r: r}, BatchCounter: counter}}
}

type channelTarget struct{ countingTarget }

func (p *channelTarget) Subscribe(got func()) func() {
	return p.subscribe(func(events <-chan registry.Event) {
		for range events {
			got()
		}
	})
}

func (p *channelTarget) SubscribeStuck() func() {
	release := make(chan struct{})
	stop := p.subscribe(func(events <-chan registry.Event) {
		<-release
		for range events {
		}
	})
	return func() { close(release); stop() }
}

// subscribe subscribes a channel, hands it to read on a goroutine, and
// returns the stop that ends the subscription and waits for read.
func (p *channelTarget) subscribe(read func(<-chan registry.Event)) func() {
	ctx, cancel := context.WithCancel(context.Background())
	sub, err := p.r.Subscribe(ctx, PluginType, registry.SubscribeOptions{MaxBacklog: math.MaxInt32})
	if err != nil {
		panic(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); read(sub.C) }()
	return func() { cancel(); <-done }
}
