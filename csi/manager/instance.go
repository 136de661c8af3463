package manager

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/supervisor"
)

// InstanceConfig configures a plugin instance actor: the actor that serves
// one allocation of one CSI plugin, as one type (csi-controller or csi-node).
type InstanceConfig struct {
	// Plugin is the allocation the instance serves (required).
	Plugin *messages.PluginInfo
	// ReportTo receives the instance's CSIInstanceFingerprinted (required):
	// the CSI manager.
	ReportTo *actor.PID
	// Logger receives the instance's log lines; nil discards them.
	Logger hclog.Logger
	// Fingerprint says how the instance fingerprints its plugin.
	Fingerprint FingerprintOptions
	// Clock sets the instance's timers (default: the real clock).
	Clock supervisor.Clock
}

// NewInstanceProps returns the props of a plugin instance actor for cfg.
// It fails on a config that names no plugin of type csi-controller or
// csi-node, no ReportTo, or negative durations. A socket path the client
// cannot use is not an error here: the instance reports it as unhealthy.
//
// The instance fingerprints its plugin at once and then on the schedule of
// cfg.Fingerprint, each time on a goroutine of its own (one at a time),
// so no RPC ever waits in its mailbox. It sends CSIInstanceFingerprinted to
// cfg.ReportTo when the fingerprint changed (update time aside), and a
// final unhealthy one ("plugin instance stopped") when it stops. A panic
// while fingerprinting fails the actor, for its parent's supervisor to
// handle.
func NewInstanceProps(cfg InstanceConfig) (*actor.Props, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return actor.PropsFromProducer(func() actor.Actor { return newInstance(cfg) },
		actor.WithReceiverMiddleware(actors.PanicStack(cfg.Logger))), nil
}

func (c InstanceConfig) validate() error {
	var problems []error
	if t := c.Plugin.GetType(); t != csi.TypeController && t != csi.TypeNode {
		problems = append(problems, fmt.Errorf("%w: instance plugin type is %q, must be %q or %q",
			csi.ErrInvalidOptions, t, csi.TypeController, csi.TypeNode))
	}
	if c.ReportTo == nil {
		problems = append(problems, fmt.Errorf("%w: instance needs a ReportTo address", csi.ErrInvalidOptions))
	}
	return errors.Join(append(problems, c.Fingerprint.validate())...)
}

func (c InstanceConfig) withDefaults() InstanceConfig {
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	c.Fingerprint = c.Fingerprint.withDefaults()
	return c
}

// systemClock is the supervisor.Clock of package time.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) AfterFunc(d time.Duration, f func()) supervisor.Stopper {
	return time.AfterFunc(d, f)
}

// instance is the plugin instance actor. It owns its prober (connection
// and learned facts) between fingerprints, the schedule of the next one,
// and the last fingerprint it reported.
type instance struct {
	cfg InstanceConfig
	log hclog.Logger

	prober    *prober            // nil while a fingerprint runs: the cycle has it
	running   *cycle             // the fingerprint in flight, or nil
	work      context.Context    // ends when the actor stops or restarts
	cancel    context.CancelFunc //
	next      supervisor.Stopper // the timer of the next fingerprint, or nil
	unhealthy int                // unhealthy fingerprints in a row
	last      *messages.CSIFingerprint
}

// cycle is one fingerprint running off the actor. Its goroutine fills
// fingerprint (or panicked) and gives the prober back, then closes done.
type cycle struct {
	prober      *prober
	fingerprint *messages.CSIFingerprint
	panicked    any
	stack       []byte
	done        chan struct{}
}

// The instance's messages to itself.
type (
	// fingerprintDue is sent by the instance's timer when the next fingerprint is due.
	fingerprintDue struct{}
	// fingerprintDone is sent by a cycle's goroutine when it has finished.
	fingerprintDone struct{ cycle *cycle }
)

func newInstance(cfg InstanceConfig) *instance {
	p := cfg.Plugin
	return &instance{
		cfg:    cfg,
		log:    cfg.Logger.With("type", p.GetType(), "name", p.GetName(), "alloc", p.GetAllocId()),
		prober: newProber(p, cfg.Fingerprint),
	}
}

// Receive handles the instance's lifecycle, its timer and its fingerprints' results.
func (a *instance) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		a.onStarted(ctx)
	case *fingerprintDue:
		a.onFingerprintDue(ctx)
	case *fingerprintDone:
		a.onFingerprintDone(ctx, msg)
	case *actor.Restarting:
		a.release()
	case *actor.Stopping:
		a.onStopping(ctx)
	}
}

func (a *instance) onStarted(ctx actor.Context) {
	a.work, a.cancel = context.WithCancel(context.Background())
	if err := csi.ValidateSocketPath(a.cfg.Plugin.GetConnection().GetSocketPath()); err != nil {
		// Waiting will not make the path usable: say so once and stay idle.
		a.log.Error("plugin instance cannot reach its plugin", "error", err)
		fp := baseFingerprint(a.cfg.Plugin)
		fp.HealthDescription = err.Error()
		a.report(ctx, fp, false)
		return
	}
	a.log.Debug("plugin instance started", "socket", a.cfg.Plugin.GetConnection().GetSocketPath())
	a.startFingerprint(ctx)
}

func (a *instance) onFingerprintDue(ctx actor.Context) {
	a.next = nil
	if a.running == nil && a.prober != nil {
		a.startFingerprint(ctx)
	}
}

// startFingerprint hands the prober to a goroutine that fingerprints the
// plugin and sends the result back as fingerprintDone. A panic there is
// caught and handed back too, to fail the actor rather than the process.
func (a *instance) startFingerprint(ctx actor.Context) {
	c := &cycle{prober: a.prober, done: make(chan struct{})}
	a.prober, a.running = nil, c
	root, self, work := ctx.ActorSystem().Root, ctx.Self(), a.work
	go func() {
		defer func() {
			if r := recover(); r != nil {
				c.panicked, c.stack = r, debug.Stack()
			}
			close(c.done)
			root.Send(self, &fingerprintDone{cycle: c})
		}()
		c.fingerprint = c.prober.fingerprint(work)
	}()
}

func (a *instance) onFingerprintDone(ctx actor.Context, msg *fingerprintDone) {
	c := msg.cycle
	if c != a.running {
		return // a cycle of an earlier incarnation, already released
	}
	a.running, a.prober = nil, c.prober
	if c.panicked != nil {
		a.log.Error("fingerprint panicked", "reason", fmt.Sprint(c.panicked), "stack", string(c.stack))
		panic(fmt.Sprintf("csi: fingerprint of %s %q (alloc %s) panicked: %v",
			a.cfg.Plugin.GetType(), a.cfg.Plugin.GetName(), a.cfg.Plugin.GetAllocId(), c.panicked))
	}
	fp := c.fingerprint
	wait := a.cfg.Fingerprint.Interval
	if fp.GetHealthy() {
		a.unhealthy = 0
	} else {
		a.unhealthy++
		wait = a.cfg.Fingerprint.retryDelay(a.unhealthy)
	}
	root, self := ctx.ActorSystem().Root, ctx.Self()
	a.next = a.cfg.Clock.AfterFunc(wait, func() { root.Send(self, &fingerprintDue{}) })
	a.report(ctx, fp, false)
}

// report sends fp to the manager when it differs from the last one sent
// (update time aside), or always when final.
func (a *instance) report(ctx actor.Context, fp *messages.CSIFingerprint, final bool) {
	if !final && a.last != nil && proto.Equal(a.last, fp) {
		return
	}
	if a.last == nil || a.last.GetHealthy() != fp.GetHealthy() {
		a.log.Debug("plugin health", "healthy", fp.GetHealthy(), "description", fp.GetHealthDescription())
	}
	a.last = fp
	sent := proto.CloneOf(fp)
	sent.UpdateTime = timestamppb.New(a.cfg.Clock.Now())
	ctx.Send(a.cfg.ReportTo, &messages.CSIInstanceFingerprinted{Fingerprint: sent, Instance: ctx.Self(), Final: final})
}

func (a *instance) onStopping(ctx actor.Context) {
	a.release()
	fp := baseFingerprint(a.cfg.Plugin)
	if a.last != nil {
		fp = proto.CloneOf(a.last)
	}
	fp.Healthy, fp.HealthDescription = false, csi.StoppedDescription
	a.report(ctx, fp, true)
	a.log.Debug("plugin instance stopped")
}

// release stops the timer, cancels the fingerprint in flight and waits for
// it to give the prober back (it returns soon: its context has ended), then
// closes the connection. It runs when the actor stops or restarts, so that
// no goroutine or connection outlives this incarnation.
func (a *instance) release() {
	if a.next != nil {
		a.next.Stop()
		a.next = nil
	}
	if a.cancel != nil {
		a.cancel()
	}
	if c := a.running; c != nil {
		<-c.done
		a.running, a.prober = nil, c.prober
	}
	if a.prober != nil {
		a.prober.close()
	}
}
