package dockervolume

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/actors/plugintype"
	"github.com/plugvisor/plugvisor/discovery"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/supervisor"
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
//
// A healthy plugin is checked every interval. An unhealthy one is checked
// again sooner, after a backoff that supervisor.Decide computes from
// recheckSpec (1 s, doubling up to the interval), so that a plugin that
// comes back is seen healthy within seconds.
type instance struct {
	cfg     instanceConfig
	client  *Client
	poll    *plugintype.Poller[*messages.DockerVolumePluginHealth] // nil when the plugin's address is unusable
	last    *messages.DockerVolumePluginHealth
	history []time.Time // the unhealthy checks since the last healthy one
	recheck supervisor.Stopper
}

// recheckDue is sent by the recheck timer of an unhealthy plugin.
type recheckDue struct {
	poll *plugintype.Poller[*messages.DockerVolumePluginHealth]
}

// DefaultRecheckDelay is the first wait before an unhealthy plugin is
// checked again.
const DefaultRecheckDelay = time.Second

// recheckSpec is the backoff of checks of an unhealthy plugin: from
// DefaultRecheckDelay, doubling up to the health interval, never giving up.
func recheckSpec(interval time.Duration) supervisor.Spec {
	return supervisor.Spec{MaxRestarts: math.MaxInt32, Within: 24 * time.Hour, InitialDelay: min(DefaultRecheckDelay, interval),
		MaxDelay: interval, Multiplier: 2, Jitter: 0.1}
}

func newInstanceProps(cfg instanceConfig) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return &instance{cfg: cfg} },
		actor.WithReceiverMiddleware(actors.PanicStack(cfg.log)))
}

// Receive hands the poller its messages, then handles the instance's lifecycle.
func (a *instance) Receive(ctx actor.Context) {
	if h, ok := a.poll.Receive(ctx); ok {
		a.report(ctx, h, false)
		a.backoff(ctx, h.GetHealthy())
		return
	}
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		a.onStarted(ctx)
	case *recheckDue:
		if msg.poll == a.poll {
			a.recheck = nil
			a.poll.Start(ctx)
		}
	case *actor.Restarting:
		a.release()
	case *actor.Stopping:
		a.release()
		a.report(ctx, a.health(false, a.last.GetScope(), StoppedDescription), true)
	}
}

// backoff schedules the next check of an unhealthy plugin sooner than the
// poller would: a new poller, started by a timer.
func (a *instance) backoff(ctx actor.Context, healthy bool) {
	if healthy {
		a.history = nil
		return
	}
	d := supervisor.Decide(recheckSpec(a.cfg.interval), a.history, time.Now(), nil, rand.Float64())
	a.history = d.History
	if d.Directive != supervisor.Restart || d.Delay >= a.cfg.interval {
		return // the poller's own interval comes first
	}
	a.poll.Stop()
	a.poll = a.newPoller()
	root, self, poll := ctx.ActorSystem().Root, ctx.Self(), a.poll
	a.recheck = supervisor.RealClock.AfterFunc(d.Delay, func() { root.Send(self, &recheckDue{poll: poll}) })
}

func (a *instance) release() {
	if a.recheck != nil {
		a.recheck.Stop()
		a.recheck = nil
	}
	a.poll.Stop()
}

func (a *instance) newPoller() *plugintype.Poller[*messages.DockerVolumePluginHealth] {
	return plugintype.NewPoller(a.cfg.interval, a.cfg.timeout, func(ctx context.Context) *messages.DockerVolumePluginHealth {
		return a.health(checkHealth(ctx, a.client))
	})
}

func (a *instance) onStarted(ctx actor.Context) {
	c, err := discovery.FromConnectionInfo(a.cfg.plugin.GetName(), a.cfg.plugin.GetConnection())
	if err != nil {
		// Waiting will not make the address usable: say so once and stay idle.
		a.report(ctx, a.health(false, "", fmt.Sprintf("cannot reach the plugin: %v", err)), false)
		return
	}
	a.client = NewClient(c).WithRetry(NoRetry) // a health check says what it sees now
	a.poll = a.newPoller()
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
		level, what := hclog.Info, "plugin is healthy"
		switch {
		case final:
			level, what = hclog.Debug, "plugin instance stopped"
		case !h.GetHealthy():
			level, what = hclog.Warn, "plugin is unhealthy"
		}
		a.cfg.log.Log(level, what, "name", h.GetName(), "alloc", h.GetAllocId(), "description", h.GetDescription())
	}
	a.last = h
	sent := proto.CloneOf(h)
	sent.UpdateTime = timestamppb.Now()
	ctx.Send(a.cfg.reportTo, sent)
}
