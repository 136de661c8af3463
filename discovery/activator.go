package discovery

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/supervisor"
)

// The protocols a discovered plugin may answer.
const (
	// ProtocolDocker: the plugin answered the Docker activation handshake.
	ProtocolDocker = "docker"
	// ProtocolCSI: the plugin's socket serves the CSI Identity service.
	ProtocolCSI = "csi"
)

// Options that discovery puts on every registration it makes, so that it
// knows its own registrations in the registry.
const (
	// OptionSource is the path of the file the plugin was found in.
	OptionSource = "discovery.source"
	// OptionProtocol is ProtocolDocker or ProtocolCSI.
	OptionProtocol = "discovery.protocol"
)

// DefaultCSITimeout is Config.CSITimeout when none is given.
const DefaultCSITimeout = 5 * time.Second

// Sentinel errors of activation, besides those of Activate.
var (
	// ErrUnknownProtocol: the socket answered neither the Docker plugin
	// handshake nor the CSI Identity service.
	ErrUnknownProtocol = errclass.New(errclass.Upstream, "plugin answers neither the Docker plugin handshake nor the CSI Identity service")
	// ErrUnusable: the plugin answered, but what it said cannot be registered
	// (a manifest implementing nothing, a CSI plugin with neither a
	// controller nor a node service, a name the registry refuses).
	ErrUnusable = errclass.New(errclass.Upstream, "plugin cannot be registered")
)

// AllocID returns the alloc ID discovery gives the plugin found in the
// file source (its spec file, or its socket when there is none): "disc-"
// and 12 hex digits of the SHA-256 of the path. The same file always gives
// the same ID, so activating a plugin again updates its registrations in
// place, and a plugin found in another file is another allocation.
func AllocID(source string) string {
	sum := sha256.Sum256([]byte(source))
	return "disc-" + hex.EncodeToString(sum[:6])
}

// activation is what a successful handshake found: the registrations to make.
type activation struct {
	protocol string
	plugins  []*messages.PluginInfo
}

// activatePlugin tells the two protocols apart: it tries the Docker
// activation handshake first (an HTTP POST), and only when that could not
// get an HTTP answer from a unix socket that accepts connections (a gRPC
// server answers an HTTP/1.1 request with HTTP/2 frames, or drops it), the
// CSI Identity service over gRPC, each within its own timeout. A refused
// connection or a missing socket is not tried as CSI: nobody listens. It
// runs off the activator's goroutine.
func activatePlugin(ctx context.Context, c Candidate, activateTimeout, csiTimeout time.Duration) (activation, error) {
	m, err := Activate(ctx, c, ActivateOptions{Timeout: activateTimeout})
	if err == nil {
		return dockerActivation(c, m)
	}
	if c.SocketPath == "" || !errors.Is(err, ErrUnreachable) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
		return activation{}, err
	}
	act, cerr := identifyCSI(ctx, c, csiTimeout)
	if cerr != nil && !errors.Is(cerr, ErrUnusable) {
		return activation{}, &PluginError{Name: c.Name, Path: c.Source, Kind: ErrUnknownProtocol,
			Err: fmt.Errorf("the Docker handshake: %v; the CSI identity handshake: %w", err, cerr)}
	}
	return act, cerr
}

// dockerActivation turns a Docker manifest into one registration per type.
func dockerActivation(c Candidate, m Manifest) (activation, error) {
	types := TypesFor(m)
	if len(types) == 0 {
		return activation{}, unusable(c, errors.New("its manifest implements nothing"))
	}
	act := activation{protocol: ProtocolDocker}
	for _, t := range types {
		act.plugins = append(act.plugins, registration(c, ProtocolDocker, t, c.Name, ""))
	}
	return act, checkRegistrations(c, act)
}

// identifyCSI asks the CSI Identity service at c's socket for the plugin's
// name, version and capabilities. The plugin is registered as
// csi-controller when it offers CONTROLLER_SERVICE, and as csi-node unless
// its NodeGetInfo answers Unimplemented: the Identity service cannot say
// whether a Node service is there, and every node plugin must answer
// NodeGetInfo (another error still means a Node service, an unhealthy one,
// for the CSI manager to report).
func identifyCSI(ctx context.Context, c Candidate, timeout time.Duration) (activation, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client, err := csi.Dial(ctx, c.SocketPath, csi.Options{RPCTimeout: timeout})
	if err != nil {
		return activation{}, err
	}
	defer client.Close()
	info, err := client.GetPluginInfo(ctx)
	if err != nil {
		return activation{}, err
	}
	caps, err := client.GetPluginCapabilities(ctx)
	if err != nil {
		return activation{}, err
	}
	var types []string
	if caps.ControllerService {
		types = append(types, csi.TypeController)
	}
	if _, err := client.NodeGetInfo(ctx); !errors.Is(err, csi.ErrUnimplemented) {
		types = append(types, csi.TypeNode)
	}
	if len(types) == 0 {
		return activation{}, unusable(c, fmt.Errorf("CSI plugin %q offers neither CONTROLLER_SERVICE nor a Node service", info.Name))
	}
	act := activation{protocol: ProtocolCSI}
	for _, t := range types {
		act.plugins = append(act.plugins, registration(c, ProtocolCSI, t, info.Name, info.VendorVersion))
	}
	return act, checkRegistrations(c, act)
}

func registration(c Candidate, protocol, ptype, name, version string) *messages.PluginInfo {
	return &messages.PluginInfo{
		Type: ptype, Name: name, Version: version, Connection: c.ConnectionInfo(), AllocId: AllocID(c.Source),
		Options: map[string]string{OptionSource: c.Source, OptionProtocol: protocol},
	}
}

// checkRegistrations refuses, before the registry would, what it would refuse.
func checkRegistrations(c Candidate, act activation) error {
	for _, p := range act.plugins {
		if err := registry.ValidatePlugin(p); err != nil {
			return unusable(c, err)
		}
	}
	return nil
}

func unusable(c Candidate, err error) error {
	return &PluginError{Name: c.Name, Path: c.Source, Kind: ErrUnusable, Err: err}
}

// activatorConfig configures the activator of one plugin.
type activatorConfig struct {
	candidate       Candidate
	registry        *registry.Registry
	reportTo        *actor.PID // the discovery actor
	activateTimeout time.Duration
	csiTimeout      time.Duration
	retry           supervisor.Spec
	slowRetry       time.Duration
	clock           supervisor.Clock
	metrics         Metrics
	log             hclog.Logger
}

// regKey names one registration.
type regKey struct{ ptype, name, alloc string }

func regKeyOf(p *messages.PluginInfo) regKey { return regKey{p.GetType(), p.GetName(), p.GetAllocId()} }

// activator is the actor that activates one plugin found on disk and keeps
// its registrations. It owns the plugin's candidate, the handshake in
// flight (on a goroutine of its own; the result comes back as attemptDone),
// the history of failed handshakes, and the registrations it sent.
//
// A failed handshake is tried again after a backoff that supervisor.Decide
// computes from the retry Spec and the failure history: exponential, up to
// MaxRestarts failures within Within. Past that the fast backoff gives up,
// and the plugin is tried again every slowRetry, for as long as its file
// is there: a plugin that starts late is still found. A failure that
// trying again cannot change (a manifest that implements nothing, a
// registration the registry refuses as invalid) is not retried: the
// plugin waits, with its registrations removed, until its file changes.
//
// Activations already registered the same way (same type, name, alloc and
// address) are not sent again: a plugin whose socket comes back keeps its
// registrations untouched, and never takes over from a newer allocation.
type activator struct {
	cfg      activatorConfig
	c        Candidate
	log      hclog.Logger
	work     context.Context
	cancel   context.CancelFunc
	running  *attempt
	again    bool // start another attempt when the running one is over
	history  []time.Time
	slow     bool // the fast backoff gave up: retrying every slowRetry
	timer    supervisor.Stopper
	due      *retryTimer                     // the identity of timer
	sent     map[regKey]*messages.PluginInfo // registrations sent and not withdrawn
	awaiting int                             // RegisterPluginResponses still to come
	refused  error                           // what the registry refused since the last attempt
	status   *messages.DiscoveredPlugin
}

// attempt is one handshake in flight.
type attempt struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// The activator's messages to itself.
type (
	// retryDue is sent by the backoff timer.
	retryDue struct{ timer *retryTimer }
	// retryNow is sent by the discovery actor when a caller asks for the
	// plugin by name (Discovery.Get): a plugin waiting out a backoff is
	// tried at once, Docker's lazy activation.
	retryNow struct{}
	// attemptDone is sent by an attempt's goroutine with its result.
	attemptDone struct {
		attempt *attempt
		result  activation
		err     error
	}
)

func newActivatorProps(cfg activatorConfig) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return &activator{cfg: cfg} },
		actor.WithReceiverMiddleware(actors.PanicStack(cfg.log)))
}

// Receive handles the activator's lifecycle, its handshakes, the registry's
// answers and the discovery actor's orders.
func (a *activator) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		a.onStarted(ctx)
	case *retryDue:
		a.onRetryDue(ctx, msg)
	case *retryNow:
		a.onRetryNow(ctx)
	case *attemptDone:
		a.onAttemptDone(ctx, msg)
	case *messages.RegisterPluginResponse:
		a.onRegistered(ctx, msg)
	case *messages.ReactivateDiscoveredPlugin:
		a.onReactivate(ctx, msg)
	case *messages.ForgetDiscoveredPlugin:
		a.onForget(ctx, msg)
	case *actor.Stopping, *actor.Restarting:
		a.release()
	}
}

func (a *activator) onStarted(ctx actor.Context) {
	a.c = a.cfg.candidate
	a.log = a.cfg.log.With("plugin", a.c.Name, "file", a.c.Source)
	a.work, a.cancel = context.WithCancel(context.Background())
	a.sent = map[regKey]*messages.PluginInfo{}
	a.status = &messages.DiscoveredPlugin{Name: a.c.Name}
	a.restart(ctx)
}

// restart forgets the failure history and activates the candidate anew.
func (a *activator) restart(ctx actor.Context) {
	a.history, a.slow = nil, false
	a.stopTimer()
	a.status.Kind, a.status.Source, a.status.Address = string(a.c.Kind), a.c.Source, a.c.Addr
	a.status.State, a.status.Failures, a.status.Error = messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_ACTIVATING, 0, ""
	a.report(ctx)
	a.start(ctx)
}

// start begins a handshake, or, when one is running, cancels it and
// begins another once it is over.
func (a *activator) start(ctx actor.Context) {
	if a.running != nil {
		a.running.cancel()
		a.again = true
		return
	}
	work, cancel := context.WithCancel(a.work)
	at := &attempt{cancel: cancel, done: make(chan struct{})}
	a.running, a.again = at, false
	root, self, c, cfg := ctx.ActorSystem().Root, ctx.Self(), a.c, a.cfg
	go func() {
		defer close(at.done)
		defer cancel()
		result, err := activatePlugin(work, c, cfg.activateTimeout, cfg.csiTimeout)
		root.Send(self, &attemptDone{attempt: at, result: result, err: err})
	}()
}

// retryTimer tells the timer in force from one stopped too late. It is not
// zero-sized: pointers to distinct zero-sized values may compare equal.
type retryTimer struct{ _ byte }

func (a *activator) onRetryDue(ctx actor.Context, msg *retryDue) {
	if a.timer == nil || msg.timer != a.due {
		return
	}
	a.timer, a.due = nil, nil
	a.start(ctx)
}

func (a *activator) onRetryNow(ctx actor.Context) {
	if a.timer == nil || a.running != nil {
		return // activating now, registered, or waiting for the file to change
	}
	a.log.Debug("plugin asked for by name: trying it now")
	a.stopTimer()
	a.start(ctx)
}

func (a *activator) onAttemptDone(ctx actor.Context, msg *attemptDone) {
	if msg.attempt != a.running {
		return // an attempt of an earlier incarnation
	}
	a.running = nil
	switch {
	case a.again:
		a.start(ctx)
	case msg.err != nil:
		a.failed(ctx, msg.err, false)
	default:
		a.register(ctx, msg.result)
	}
}

// register sends the registrations of act, and withdraws those made
// before (by this activator or an earlier incarnation) that act no longer has.
func (a *activator) register(ctx actor.Context, act activation) {
	want := map[regKey]*messages.PluginInfo{}
	for _, p := range act.plugins {
		want[regKeyOf(p)] = p
	}
	for k, p := range a.owned() {
		if _, ok := want[k]; !ok {
			a.deregister(ctx, p)
		}
	}
	a.refused = nil
	snap := a.cfg.registry.Snapshot()
	for k, p := range want {
		a.sent[k] = p
		if registeredAs(snap, p) {
			continue // already there, the same: sending it again could only disturb
		}
		ctx.Send(a.cfg.registry.PID(), &messages.RegisterPlugin{Plugin: p, ReplyTo: ctx.Self()})
		a.awaiting++
	}
	a.status.Protocol, a.status.Registered = act.protocol, slices.SortedFunc(maps.Values(want), byTypeThenName)
	if a.awaiting == 0 {
		a.registered(ctx)
	}
}

// registeredAs reports whether s holds p's allocation with p's contents.
func registeredAs(s *registry.Snapshot, p *messages.PluginInfo) bool {
	for _, q := range s.Allocations(p.GetType(), p.GetName()) {
		if q.GetAllocId() == p.GetAllocId() {
			return proto.Equal(q, p)
		}
	}
	return false
}

func (a *activator) onRegistered(ctx actor.Context, msg *messages.RegisterPluginResponse) {
	a.awaiting--
	if err := messages.ErrorFromProto(msg.GetError()); err != nil {
		a.refused = errors.Join(a.refused, err)
	}
	if a.awaiting > 0 || a.running != nil {
		return // more answers to come, or a newer attempt under way
	}
	if a.refused != nil {
		a.failed(ctx, unusable(a.c, a.refused), errors.Is(a.refused, registry.ErrInvalid))
		return
	}
	a.registered(ctx)
}

// registered records that every registration of the plugin is in place.
func (a *activator) registered(ctx actor.Context) {
	a.history, a.slow = nil, false
	a.status.NextAttemptTime = nil
	a.status.State, a.status.Failures, a.status.Error = messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_REGISTERED, 0, ""
	types := make([]string, 0, len(a.status.GetRegistered()))
	for _, p := range a.status.GetRegistered() {
		types = append(types, p.GetType()+"/"+p.GetName())
	}
	a.log.Info("plugin activated and registered", "protocol", a.status.GetProtocol(), "as", strings.Join(types, ", "))
	a.report(ctx)
}

// failed records a failed handshake or registration. A permanent failure
// (one that trying again cannot change) waits for the file to change;
// any other is tried again after the fast backoff, or, once that gave up,
// after the slow retry interval.
func (a *activator) failed(ctx actor.Context, err error, permanent bool) {
	a.status.Failures++
	a.status.Error = err.Error()
	if permanent || errors.Is(err, ErrUnusable) {
		a.log.Error("plugin activation failed for good: waiting for its file to change", "failures", a.status.GetFailures(), "error", err)
		a.observe("wait")
		a.status.State = messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_FAILED
		a.status.Registered, a.status.NextAttemptTime = nil, nil
		a.withdraw(ctx)
		a.report(ctx)
		return
	}
	now := a.cfg.clock.Now()
	delay, then := a.cfg.slowRetry, "slow"
	if !a.slow {
		d := supervisor.Decide(a.cfg.retry, a.history, now, err, rand.Float64())
		a.history = d.History
		if d.Directive == supervisor.Restart {
			delay, then = d.Delay, "retry"
		} else {
			a.slow = true
			a.log.Warn("plugin activation keeps failing: trying again every slow retry interval, for as long as its file is there",
				"failures", a.status.GetFailures(), "interval", delay)
		}
	}
	a.observe(then)
	a.log.Debug("plugin activation failed: trying again", "failures", a.status.GetFailures(), "delay", delay, "error", err)
	a.status.State = messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_ACTIVATING
	a.status.NextAttemptTime = timestamppb.New(now.Add(delay))
	a.stopTimer()
	root, self, due := ctx.ActorSystem().Root, ctx.Self(), &retryTimer{}
	a.timer, a.due = a.cfg.clock.AfterFunc(delay, func() { root.Send(self, &retryDue{timer: due}) }), due
	a.report(ctx)
}

func (a *activator) observe(then string) {
	if a.cfg.metrics != nil {
		a.cfg.metrics.ActivationFailed(a.c.Name, then)
	}
}

func (a *activator) onReactivate(ctx actor.Context, msg *messages.ReactivateDiscoveredPlugin) {
	c, err := FromConnectionInfo(a.c.Name, msg.GetConnection())
	if err != nil {
		a.failed(ctx, err, true)
		return
	}
	c.Kind, c.Source = Kind(msg.GetKind()), msg.GetSource()
	a.c = c
	a.log = a.cfg.log.With("plugin", c.Name, "file", c.Source)
	a.log.Info("plugin file changed: activating it again")
	a.restart(ctx)
}

func (a *activator) onForget(ctx actor.Context, msg *messages.ForgetDiscoveredPlugin) {
	a.log.Info("plugin is gone: removing its registrations", "why", msg.GetReason())
	a.withdraw(ctx)
	ctx.Stop(ctx.Self())
}

// withdraw deregisters every registration of the plugin.
func (a *activator) withdraw(ctx actor.Context) {
	for _, p := range a.owned() {
		a.deregister(ctx, p)
	}
}

// deregister withdraws one registration. Nobody waits for the answer: a
// registration that is not there any more is as good as withdrawn, and the
// discovery actor's cleanup after each scan catches anything left over.
func (a *activator) deregister(ctx actor.Context, p *messages.PluginInfo) {
	ctx.Send(a.cfg.registry.PID(), &messages.DeregisterPlugin{Type: p.GetType(), Name: p.GetName(), AllocId: p.GetAllocId()})
	delete(a.sent, regKeyOf(p))
}

// owned returns the registrations of this plugin: those sent, and those in
// the registry's latest snapshot that came from its file (made by an
// earlier incarnation, say).
func (a *activator) owned() map[regKey]*messages.PluginInfo {
	out := maps.Clone(a.sent)
	for _, p := range discovered(a.cfg.registry.Snapshot()) {
		if p.GetOptions()[OptionSource] == a.c.Source {
			out[regKeyOf(p)] = p
		}
	}
	return out
}

// discovered returns every allocation in s that discovery registered.
func discovered(s *registry.Snapshot) []*messages.PluginInfo {
	var out []*messages.PluginInfo
	for _, t := range s.Types() {
		for _, current := range s.List(t) {
			for _, p := range s.Allocations(t, current.GetName()) {
				if p.GetOptions()[OptionSource] != "" {
					out = append(out, p)
				}
			}
		}
	}
	return out
}

func (a *activator) report(ctx actor.Context) {
	ctx.Send(a.cfg.reportTo, &messages.DiscoveryActivatorReport{Plugin: cloneStatus(a.status), Activator: ctx.Self()})
}

func (a *activator) stopTimer() {
	if a.timer != nil {
		a.timer.Stop()
		a.timer, a.due = nil, nil
	}
}

// release stops the timer, cancels the handshake in flight and waits for
// it, so that nothing outlives this incarnation.
func (a *activator) release() {
	a.stopTimer()
	if a.cancel != nil {
		a.cancel()
	}
	if a.running != nil {
		<-a.running.done
		a.running = nil
	}
}

func byTypeThenName(x, y *messages.PluginInfo) int {
	return strings.Compare(x.GetType()+"\x00"+x.GetName(), y.GetType()+"\x00"+y.GetName())
}
