package manager

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/messages"
)

// Default values of [FingerprintOptions].
const (
	DefaultFingerprintInterval = 30 * time.Second
	DefaultFingerprintRetry    = time.Second
)

// Plugin is what fingerprinting asks of a CSI plugin. *[Client] is one;
// [FingerprintOptions.Dial] may return another (a fake in a test).
type Plugin interface {
	GetPluginInfo(ctx context.Context) (csi.PluginInfo, error)
	GetPluginCapabilities(ctx context.Context) (csi.PluginCapabilities, error)
	Probe(ctx context.Context) (bool, error)
	ControllerGetCapabilities(ctx context.Context) (csi.ControllerCapabilities, error)
	NodeGetInfo(ctx context.Context) (csi.NodeInfo, error)
	NodeGetCapabilities(ctx context.Context) (csi.NodeCapabilities, error)
	Close() error
}

// DialFunc connects to the plugin listening on socketPath, giving up when
// ctx ends.
type DialFunc func(ctx context.Context, socketPath string, opts csi.Options) (Plugin, error)

// DialPlugin is the default DialFunc: [Dial].
func DialPlugin(ctx context.Context, socketPath string, opts csi.Options) (Plugin, error) {
	c, err := csi.Dial(ctx, socketPath, opts)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// FingerprintOptions say how a plugin instance fingerprints its plugin.
// Zero fields get their defaults; negative durations are refused.
//
// A fingerprint runs at once when the instance starts, then every Interval
// while the plugin is healthy. After an unhealthy one the next comes
// sooner: after Retry, doubling with each unhealthy fingerprint in a row,
// never later than Interval.
type FingerprintOptions struct {
	// Interval is the time between fingerprints of a healthy plugin
	// (default DefaultFingerprintInterval).
	Interval time.Duration
	// Retry is the first wait after an unhealthy fingerprint (default
	// DefaultFingerprintRetry, or Interval when that is shorter).
	Retry time.Duration
	// RPCTimeout bounds the connection attempt and each RPC (default
	// DefaultRPCTimeout).
	RPCTimeout time.Duration
	// Dial connects to a plugin (default DialPlugin). It must return soon
	// after its context ends, as must the Plugin's methods.
	Dial DialFunc
	// Observe, when set, is called after every fingerprint with its result
	// and how long it took (the agent feeds its metrics from it). It runs
	// on the fingerprint's goroutine: it must be safe for concurrent use
	// and must not block.
	Observe func(fp *messages.CSIFingerprint, took time.Duration)
}

// withDefaults returns o with every zero field set to its default.
func (o FingerprintOptions) withDefaults() FingerprintOptions {
	if o.Interval == 0 {
		o.Interval = DefaultFingerprintInterval
	}
	if o.Retry == 0 {
		o.Retry = DefaultFingerprintRetry
	}
	o.Retry = min(o.Retry, o.Interval)
	if o.RPCTimeout == 0 {
		o.RPCTimeout = csi.DefaultRPCTimeout
	}
	if o.Dial == nil {
		o.Dial = DialPlugin
	}
	return o
}

// validate reports negative durations.
func (o FingerprintOptions) validate() error {
	if o.Interval < 0 || o.Retry < 0 || o.RPCTimeout < 0 {
		return fmt.Errorf("%w: fingerprint durations must not be negative: interval %v, retry %v, RPC timeout %v",
			csi.ErrInvalidOptions, o.Interval, o.Retry, o.RPCTimeout)
	}
	return nil
}

// retryDelay is the wait after the n-th unhealthy fingerprint in a row.
func (o FingerprintOptions) retryDelay(n int) time.Duration {
	d := o.Retry
	for i := 1; i < n && d < o.Interval; i++ {
		d *= 2
	}
	return min(d, o.Interval)
}

// clientOptions are the options of the instance's CSI client. Its
// reconnection backoff is capped at the fingerprint interval, so a plugin
// that comes back is reached by the next fingerprint or the one after; it
// never starts below the client's default, because gRPC also gives each
// connection attempt only as long as the current backoff to complete.
func (o FingerprintOptions) clientOptions() csi.Options {
	return csi.Options{
		RPCTimeout:     o.RPCTimeout,
		BackoffInitial: csi.DefaultBackoffInitial,
		BackoffMax:     max(csi.DefaultBackoffInitial, min(csi.DefaultBackoffMax, o.Interval)),
	}
}

// prober is one instance's connection to its plugin and the facts it learns
// once (plugin info, plugin capabilities, node info). It belongs to the
// instance actor between fingerprints and to the fingerprint's goroutine
// while one runs, never to both.
type prober struct {
	plugin *messages.PluginInfo
	opts   FingerprintOptions

	conn           Plugin      // nil until connected
	socket         os.FileInfo // the socket file of the last fingerprint
	relearn        bool        // the facts learned once must be asked again
	info           *csi.PluginInfo
	pluginCaps     *csi.PluginCapabilities
	node           *csi.NodeInfo
	controllerCaps *csi.ControllerCapabilities // of the last healthy fingerprint
	nodeCaps       *csi.NodeCapabilities       // of the last healthy fingerprint
}

func newProber(plugin *messages.PluginInfo, opts FingerprintOptions) *prober {
	return &prober{plugin: plugin, opts: opts}
}

// fingerprint asks the plugin for its health and facts. The first time
// (and until each succeeds) it asks GetPluginInfo, GetPluginCapabilities
// and, for a node plugin, NodeGetInfo; every time it asks Probe, then
// ControllerGetCapabilities or NodeGetCapabilities. It asks the first three
// again after the plugin was unavailable and when the socket is another
// file (the plugin restarted and bound it anew, perhaps as another node):
// facts such as the node ID, topology and volume limit are never kept from
// an earlier run of the plugin. The result has no update time.
func (p *prober) fingerprint(ctx context.Context) *messages.CSIFingerprint {
	start := time.Now()
	err := p.check(ctx)
	fp := p.facts()
	fp.Healthy = err == nil
	fp.HealthDescription = csi.HealthyDescription
	if err != nil {
		fp.HealthDescription = err.Error()
	}
	if p.opts.Observe != nil {
		p.opts.Observe(fp, time.Since(start))
	}
	return fp
}

func (p *prober) check(ctx context.Context) error {
	socket := p.plugin.GetConnection().GetSocketPath()
	file, err := os.Stat(socket)
	if err != nil {
		var pathErr *fs.PathError
		if errors.As(err, &pathErr) {
			err = pathErr.Err
		}
		return fmt.Errorf("socket %s: %w", socket, err)
	}
	if p.socket != nil && !sameSocket(p.socket, file) {
		p.relearn = true
		p.close() // a new socket: connect to it afresh
	}
	p.socket = file
	if p.conn == nil {
		dialCtx, cancel := context.WithTimeout(ctx, p.opts.RPCTimeout)
		defer cancel()
		conn, err := p.opts.Dial(dialCtx, socket, p.opts.clientOptions())
		if err != nil {
			return p.describe("connect", err)
		}
		p.conn = conn
	}
	if err := learnOnce(ctx, p, &p.info, "GetPluginInfo", p.conn.GetPluginInfo); err != nil {
		return err
	}
	if err := learnOnce(ctx, p, &p.pluginCaps, "GetPluginCapabilities", p.conn.GetPluginCapabilities); err != nil {
		return err
	}
	if p.plugin.GetType() == csi.TypeNode {
		if err := learnOnce(ctx, p, &p.node, "NodeGetInfo", p.conn.NodeGetInfo); err != nil {
			return err
		}
	}
	p.relearn = false
	ready, err := p.conn.Probe(ctx)
	if err != nil {
		return p.describe("Probe", err)
	}
	if !ready {
		//lint:ignore ST1005 the health description starts with the RPC's name, as every other one does.
		return errors.New("Probe: plugin is not ready")
	}
	if p.plugin.GetType() == csi.TypeNode {
		return learn(ctx, p, &p.nodeCaps, "NodeGetCapabilities", p.conn.NodeGetCapabilities)
	}
	return learn(ctx, p, &p.controllerCaps, "ControllerGetCapabilities", p.conn.ControllerGetCapabilities)
}

// learnOnce asks rpc with call unless *slot is known already and need not
// be asked again. A failed call leaves *slot as it was.
func learnOnce[T any](ctx context.Context, p *prober, slot **T, rpc string, call func(context.Context) (T, error)) error {
	if *slot != nil && !p.relearn {
		return nil
	}
	return learn(ctx, p, slot, rpc, call)
}

// learn asks rpc with call and keeps the answer in *slot.
func learn[T any](ctx context.Context, p *prober, slot **T, rpc string, call func(context.Context) (T, error)) error {
	v, err := call(ctx)
	if err != nil {
		return p.describe(rpc, err)
	}
	*slot = &v
	return nil
}

// sameSocket says whether a and b are the same socket file. A socket bound
// anew may get the inode of the one it replaced, never its creation time.
func sameSocket(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.ModTime().Equal(b.ModTime())
}

// describe turns the error of rpc into a health description an operator
// can act on. A plugin that was unavailable may come back as another run
// of itself: what was learned once is asked again.
func (p *prober) describe(rpc string, err error) error {
	if errors.Is(err, csi.ErrUnavailable) || errors.Is(err, csi.ErrConnect) {
		p.relearn = true
	}
	if errors.Is(err, csi.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: deadline exceeded after %v", rpc, p.opts.RPCTimeout)
	}
	text := err.Error()
	if !strings.HasPrefix(text, rpc+": ") {
		text = rpc + ": " + text
	}
	return errors.New(text)
}

// close releases the connection, if any.
func (p *prober) close() {
	if p.conn != nil {
		_ = p.conn.Close()
		p.conn = nil
	}
}

// facts returns a fingerprint of what is known about the plugin, health aside.
func (p *prober) facts() *messages.CSIFingerprint {
	fp := baseFingerprint(p.plugin)
	if p.info != nil {
		fp.PluginInfo = &messages.CSIPluginInfo{Name: p.info.Name, VendorVersion: p.info.VendorVersion, Manifest: p.info.Manifest}
	}
	if p.node != nil {
		fp.NodeInfo = &messages.CSINodeInfo{NodeId: p.node.NodeID, MaxVolumes: p.node.MaxVolumes, AccessibleTopology: p.node.AccessibleTopology}
	}
	if p.pluginCaps != nil {
		fp.Capabilities = csi.CapabilityNames(p.pluginCaps, p.controllerCaps, p.nodeCaps)
	}
	return fp
}

// baseFingerprint is an unhealthy fingerprint naming plugin's allocation
// and the socket its instance serves it on.
func baseFingerprint(plugin *messages.PluginInfo) *messages.CSIFingerprint {
	return &messages.CSIFingerprint{Type: plugin.GetType(), Name: plugin.GetName(), AllocId: plugin.GetAllocId(),
		SocketPath: plugin.GetConnection().GetSocketPath()}
}
