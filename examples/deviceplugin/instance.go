package deviceplugin

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"

	"github.com/plugvisor/plugvisor/actors/plugintype"
	"github.com/plugvisor/plugvisor/messages"
)

// DeviceHealth is sent by an instance to its manager when its plugin's
// health changed, and as its last word when it stops (Final); the manager
// sends each to its subscribers, and sends one of its own (Final, no
// Instance) when an instance failed for good. A plain Go struct: the type's
// messages need nothing in plugvisor's messages/.
type DeviceHealth struct {
	Name, AllocID string
	Instance      *actor.PID
	Healthy       bool
	Devices       []string
	Description   string
	Final         bool
}

// StoppedDescription is the Description of an instance's last report.
const StoppedDescription = "instance stopped"

// checked is one health check's result.
type checked struct {
	status Status
	err    error
}

// instance checks the health of one allocation of one device plugin,
// every interval, off its goroutine (plugintype.Poller). A failed check is
// a failure of the instance: it reports it, then panics, and its
// supervisor restarts it after a backoff or gives up.
type instance struct {
	plugin   *messages.PluginInfo
	reportTo *actor.PID
	interval time.Duration
	timeout  time.Duration
	log      hclog.Logger
	poll     *plugintype.Poller[checked]
	last     *DeviceHealth
}

// Receive hands the poller its messages, then handles the life cycle.
func (a *instance) Receive(ctx actor.Context) {
	if r, ok := a.poll.Receive(ctx); ok {
		a.onChecked(ctx, r)
		return
	}
	switch ctx.Message().(type) {
	case *actor.Started:
		socket := a.plugin.GetConnection().GetSocketPath()
		a.poll = plugintype.NewPoller(a.interval, a.timeout, func(ctx context.Context) checked {
			s, err := Check(ctx, socket)
			return checked{s, err}
		})
		a.poll.Start(ctx)
	case *actor.Restarting:
		a.poll.Stop()
	case *actor.Stopping:
		a.poll.Stop()
		a.report(ctx, DeviceHealth{Description: StoppedDescription, Final: true})
	}
}

func (a *instance) onChecked(ctx actor.Context, r checked) {
	h := DeviceHealth{Healthy: r.err == nil && r.status.Healthy, Devices: r.status.Devices,
		Description: fmt.Sprintf("%d devices", len(r.status.Devices))}
	switch {
	case r.err != nil:
		h.Description = "health check failed: " + r.err.Error()
	case !r.status.Healthy:
		h.Description = "plugin says it is unhealthy: " + r.status.Error
	}
	a.report(ctx, h)
	if !h.Healthy {
		panic(fmt.Errorf("device plugin %s (%s): %s", a.plugin.GetName(), a.plugin.GetAllocId(), h.Description))
	}
}

// report sends h to the manager when it differs from the last report, or
// always when final.
func (a *instance) report(ctx actor.Context, h DeviceHealth) {
	h.Name, h.AllocID, h.Instance = a.plugin.GetName(), a.plugin.GetAllocId(), ctx.Self()
	if last := a.last; !h.Final && last != nil && last.Healthy == h.Healthy && last.Description == h.Description &&
		slices.Equal(last.Devices, h.Devices) {
		return
	}
	a.last = &h
	a.log.Debug("device plugin health", "name", h.Name, "alloc", h.AllocID, "healthy", h.Healthy, "description", h.Description)
	ctx.Send(a.reportTo, &h)
}
