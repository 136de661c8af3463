package kubeletreg

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	regapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/names"
	"github.com/plugvisor/plugvisor/registry"
)

// Reasons of a refused registration, the values of Metrics.Refused.
const (
	// ReasonUnreachable: the registration socket did not answer GetInfo
	// in time, or answered garbage. Tried again after a backoff.
	ReasonUnreachable = "unreachable"
	// ReasonType: the plugin type is not CSIPlugin.
	ReasonType = "type"
	// ReasonVersion: no supported version is a CSI 1.x version.
	ReasonVersion = "version"
	// ReasonName: the name fails the names rules.
	ReasonName = "name"
	// ReasonEndpoint: the endpoint is not a unix socket or its path fails
	// the socket-path checks.
	ReasonEndpoint = "endpoint"
	// ReasonCSI: the CSI endpoint did not answer its Identity service in
	// time. Tried again after a backoff.
	ReasonCSI = "csi"
	// ReasonMismatch: the CSI endpoint calls itself by another name.
	ReasonMismatch = "mismatch"
	// ReasonConflict: another registration socket holds the name with
	// another endpoint.
	ReasonConflict = "conflict"
	// ReasonRegistry: the registry refused the registration.
	ReasonRegistry = "registry"
)

// Reasons lists every reason of a refusal, for metrics to start at zero.
var Reasons = []string{ReasonUnreachable, ReasonType, ReasonVersion, ReasonName, ReasonEndpoint, ReasonCSI,
	ReasonMismatch, ReasonConflict, ReasonRegistry}

// refusal is why a registration was refused. A permanent one waits for
// the socket to change; any other is tried again after a backoff.
type refusal struct {
	reason    string
	permanent bool
	err       error
}

func (r *refusal) Error() string { return r.err.Error() }

func refuse(reason string, permanent bool, format string, args ...any) *refusal {
	return &refusal{reason: reason, permanent: permanent, err: fmt.Errorf(format, args...)}
}

// plan is what a registration socket asks for, checked: the registrations
// to make.
type plan struct {
	name, endpoint string
	plugins        []*messages.PluginInfo
}

// dialRegistration connects to a registration socket. The connection is
// lazy, and its calls wait for it to be ready (within their deadline),
// trying again from 10ms on: a socket is seen between its bind and its
// listen (node-driver-registrar's net.Listen), and is answering a few
// milliseconds later.
func dialRegistration(socket string) (regapi.RegistrationClient, func(), error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
			BaseDelay: 10 * time.Millisecond, Multiplier: 2, Jitter: 0.2, MaxDelay: time.Second}}))
	if err != nil {
		return nil, nil, err
	}
	return regapi.NewRegistrationClient(conn), func() { _ = conn.Close() }, nil
}

// probe asks the registration socket for its plugin (GetInfo), checks what
// it says as kubelet does, and asks the plugin's CSI endpoint which
// services it offers: csi-node always (the sidecar registers a node
// plugin), csi-controller as well when the plugin offers CONTROLLER_SERVICE.
// It runs off the watcher's goroutine, each call within timeout.
func probe(ctx context.Context, socket string, timeout time.Duration) (plan, *refusal) {
	client, closeConn, err := dialRegistration(socket)
	if err != nil {
		return plan{}, refuse(ReasonUnreachable, false, "registration socket %s: %v", socket, err)
	}
	defer closeConn()
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	info, err := client.GetInfo(callCtx, &regapi.InfoRequest{})
	cancel()
	if err != nil {
		return plan{}, refuse(ReasonUnreachable, false, "registration socket %s: GetInfo: %v (timeout %v)", socket, err, timeout)
	}
	endpoint, r := check(socket, info)
	if r != nil {
		return plan{}, r
	}
	return identify(ctx, socket, info, endpoint, timeout)
}

// check refuses, as kubelet does, a type other than CSIPlugin and versions
// none of which is a CSI 1.x version; and refuses a name that fails the
// names rules, and an endpoint that is not a unix socket. An empty
// endpoint is the registration socket itself, as kubelet takes it.
func check(socket string, info *regapi.PluginInfo) (string, *refusal) {
	if info.GetType() != regapi.CSIPlugin {
		return "", refuse(ReasonType, true, "registration socket %s: plugin type %q is not supported; only %q plugins register here",
			socket, info.GetType(), regapi.CSIPlugin)
	}
	if err := names.Check("plugin name", info.GetName()); err != nil {
		return "", refuse(ReasonName, true, "registration socket %s: %v", socket, err)
	}
	if !supported(info.GetSupportedVersions()) {
		return "", refuse(ReasonVersion, true, "registration socket %s: plugin %q supports versions %q, none of them 1.x; this CSI client speaks CSI 1.x",
			socket, info.GetName(), info.GetSupportedVersions())
	}
	endpoint := cutUnix(info.GetEndpoint())
	if endpoint == "" {
		endpoint = socket
	}
	if strings.Contains(endpoint, "://") {
		return "", refuse(ReasonEndpoint, true, "registration socket %s: plugin %q: endpoint %q is not a unix socket; give the path of the plugin's CSI socket",
			socket, info.GetName(), info.GetEndpoint())
	}
	if err := names.CheckSocketFile("endpoint", endpoint); err != nil {
		return "", refuse(ReasonEndpoint, true, "registration socket %s: plugin %q: %v", socket, info.GetName(), err)
	}
	return endpoint, nil
}

// cutUnix removes a unix:// scheme from an endpoint.
func cutUnix(endpoint string) string {
	if rest, ok := strings.CutPrefix(endpoint, "unix://"); ok {
		return rest
	}
	return endpoint
}

// supported reports whether any of versions is a CSI 1.x version
// ("1.0.0", "v1.2"), kubelet's rule: 0.x is too old, 2.x and later need
// not be compatible.
func supported(versions []string) bool {
	for _, v := range versions {
		major, _, _ := strings.Cut(strings.TrimPrefix(v, "v"), ".")
		if n, err := strconv.Atoi(major); err == nil && n == 1 {
			return true
		}
	}
	return false
}

// identify asks the CSI endpoint for its name and capabilities, and makes
// the registrations.
func identify(ctx context.Context, socket string, info *regapi.PluginInfo, endpoint string, timeout time.Duration) (plan, *refusal) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client, err := csi.Dial(ctx, endpoint, csi.Options{RPCTimeout: timeout})
	if err != nil {
		return plan{}, refuse(ReasonEndpoint, true, "registration socket %s: plugin %q: endpoint: %v", socket, info.GetName(), err)
	}
	defer client.Close()
	pi, err := client.GetPluginInfo(ctx)
	if err != nil {
		return plan{}, refuse(ReasonCSI, false, "registration socket %s: plugin %q: CSI endpoint %s: %v", socket, info.GetName(), endpoint, err)
	}
	if pi.Name != info.GetName() {
		return plan{}, refuse(ReasonMismatch, true, "registration socket %s: names plugin %q, but its CSI endpoint %s calls itself %q",
			socket, info.GetName(), endpoint, pi.Name)
	}
	caps, err := client.GetPluginCapabilities(ctx)
	if err != nil {
		return plan{}, refuse(ReasonCSI, false, "registration socket %s: plugin %q: CSI endpoint %s: %v", socket, info.GetName(), endpoint, err)
	}
	types := []string{csi.TypeNode}
	if caps.ControllerService {
		types = append(types, csi.TypeController)
	}
	p := plan{name: info.GetName(), endpoint: endpoint}
	for _, t := range types {
		reg := &messages.PluginInfo{Type: t, Name: pi.Name, Version: pi.VendorVersion, AllocId: AllocID(socket),
			Connection: &messages.ConnectionInfo{SocketPath: endpoint}, Options: map[string]string{OptionSocket: socket}}
		if err := registry.ValidatePlugin(reg); err != nil {
			return plan{}, refuse(ReasonName, true, "registration socket %s: %v", socket, err)
		}
		p.plugins = append(p.plugins, reg)
	}
	return p, nil
}

// settle makes the plan's registrations (unless r already refused it),
// skipping those the registry holds as they are, and tells the
// registration socket the outcome with NotifyRegistrationStatus. A
// refusal that may pass (a socket or a CSI endpoint that did not answer
// in time) is not told, as kubelet does not: node-driver-registrar exits
// when told it was not registered, and the watcher tries again. It runs
// off the watcher's goroutine.
func settle(ctx context.Context, reg *registry.Registry, socket string, p plan, r *refusal, timeout time.Duration) (*refusal, error) {
	if r == nil {
		snap := reg.Snapshot()
		for _, info := range p.plugins {
			if registeredAs(snap, info) {
				continue
			}
			if err := reg.RegisterPlugin(info); err != nil {
				r = refuse(ReasonRegistry, errors.Is(err, registry.ErrInvalid), "registration socket %s: %v", socket, err)
				break
			}
		}
	}
	if r != nil && !r.permanent {
		return r, nil
	}
	status := &regapi.RegistrationStatus{PluginRegistered: r == nil}
	if r != nil {
		status.Error = r.Error()
	}
	return r, notify(ctx, socket, status, timeout)
}

// notify sends a registration socket the outcome, within timeout.
func notify(ctx context.Context, socket string, status *regapi.RegistrationStatus, timeout time.Duration) error {
	client, closeConn, err := dialRegistration(socket)
	if err != nil {
		return err
	}
	defer closeConn()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err = client.NotifyRegistrationStatus(ctx, status)
	return err
}

// registeredAs reports whether s holds p's allocation with p's contents:
// sending it again could only disturb.
func registeredAs(s *registry.Snapshot, p *messages.PluginInfo) bool {
	for _, q := range s.Allocations(p.GetType(), p.GetName()) {
		if q.GetAllocId() == p.GetAllocId() {
			return proto.Equal(q, p)
		}
	}
	return false
}
