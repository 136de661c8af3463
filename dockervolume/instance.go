package dockervolume

import (
	"context"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/actors/plugintype"
	"github.com/plugvisor/plugvisor/discovery"
	"github.com/plugvisor/plugvisor/messages"
)

// StoppedDescription is the health description of an instance that stopped.
const StoppedDescription = "plugin instance stopped"

// instanceConfig configures an instance actor: the actor that checks the
// health of one allocation of one volume plugin.
type instanceConfig struct {
	plugin   *messages.PluginInfo
	reportTo *actor.PID
	interval time.Duration // between checks
	timeout  time.Duration // of one check
	log      hclog.Logger
}

// instance is the docker-volume instance actor. It owns its plugin's
// client, the poller that checks its health (off the actor's goroutine, one
// check at a time) and the last health it reported.
type instance struct {
	cfg  instanceConfig
	poll *plugintype.Poller[*messages.DockerVolumePluginHealth] // nil when the plugin's address is unusable
	last *messages.DockerVolumePluginHealth
}

func newInstanceProps(cfg instanceConfig) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return &instance{cfg: cfg} },
		actor.WithReceiverMiddleware(actors.PanicStack(cfg.log)))
}

// Receive hands the poller its messages, then handles the instance's lifecycle.
func (a *instance) Receive(ctx actor.Context) {
	if h, ok := a.poll.Receive(ctx); ok {
		a.report(ctx, h, false)
		return
	}
	switch ctx.Message().(type) {
	case *actor.Started:
		a.onStarted(ctx)
	case *actor.Restarting:
		a.poll.Stop()
	case *actor.Stopping:
		a.poll.Stop()
		a.report(ctx, a.health(false, a.last.GetScope(), StoppedDescription), true)
	}
}

func (a *instance) onStarted(ctx actor.Context) {
	c, err := discovery.FromConnectionInfo(a.cfg.plugin.GetName(), a.cfg.plugin.GetConnection())
	if err != nil {
		// Waiting will not make the address usable: say so once and stay idle.
		a.report(ctx, a.health(false, "", fmt.Sprintf("cannot reach the plugin: %v", err)), false)
		return
	}
	client := NewClient(c)
	a.poll = plugintype.NewPoller(a.cfg.interval, a.cfg.timeout, func(ctx context.Context) *messages.DockerVolumePluginHealth {
		return a.health(checkHealth(ctx, client))
	})
	a.poll.Start(ctx)
}

// checkHealth asks the plugin for its capabilities, and, when that fails,
// for its volumes: a plugin that answers either is healthy.
func checkHealth(ctx context.Context, client *Client) (healthy bool, scope, description string) {
	caps, err := client.Capabilities(ctx)
	if err == nil {
		return true, caps.Scope, "VolumeDriver.Capabilities answered"
	}
	if _, lerr := client.List(ctx); lerr != nil {
		return false, "", fmt.Sprintf("VolumeDriver.Capabilities and VolumeDriver.List failed: %v; %v", err, lerr)
	}
	return true, "", fmt.Sprintf("VolumeDriver.List answered (VolumeDriver.Capabilities failed: %v)", err)
}

// health returns a health report about the instance's plugin.
func (a *instance) health(healthy bool, scope, description string) *messages.DockerVolumePluginHealth {
	return &messages.DockerVolumePluginHealth{
		Name: a.cfg.plugin.GetName(), AllocId: a.cfg.plugin.GetAllocId(),
		Healthy: healthy, Scope: scope, Description: description,
	}
}

// report sends h to the manager when it differs from the last one sent
// (update time aside), or always when final.
func (a *instance) report(ctx actor.Context, h *messages.DockerVolumePluginHealth, final bool) {
	h.Instance, h.Final = ctx.Self(), final
	if !final && proto.Equal(a.last, h) {
		return
	}
	if a.last.GetHealthy() != h.GetHealthy() || a.last == nil {
		a.cfg.log.Debug("plugin health", "name", h.GetName(), "alloc", h.GetAllocId(),
			"healthy", h.GetHealthy(), "description", h.GetDescription())
	}
	a.last = h
	sent := proto.CloneOf(h)
	sent.UpdateTime = timestamppb.Now()
	ctx.Send(a.cfg.reportTo, sent)
}
