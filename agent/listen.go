package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/csi/catalog"
	"github.com/plugvisor/plugvisor/csi/controller"
	"github.com/plugvisor/plugvisor/csi/volumes"
	dockervolumes "github.com/plugvisor/plugvisor/dockervolume/volumes"
	"github.com/plugvisor/plugvisor/internal/httpgate"
	"github.com/plugvisor/plugvisor/registry"
)

// served is one listener with the policy it is served under, and the gate
// under it (under TLS, when the listener has it).
type served struct {
	listener   net.Listener
	policy     api.Listener
	gate       *httpgate.Listener
	maxStreams int
}

// The agent's parts are the API's as they are.
var (
	_ api.Registry      = (*registry.Registry)(nil)
	_ api.Catalog       = (*catalog.Catalog)(nil)
	_ api.VolumeManager = (*volumes.Manager)(nil)
	_ api.Controller    = (*controller.Controller)(nil)
	_ api.DockerVolumes = (*dockervolumes.Service)(nil)
)

// serveAPI serves the API on each listener bound at start (the unix
// socket and, when configured, TCP) under its policy and the HTTP limits.
func (a *Agent) serveAPI() {
	ctx, cancel := context.WithCancelCause(context.Background())
	a.cancel = func() { cancel(api.ErrStopping) }
	apiServer := &api.Server{ // its parts as they are: see the assertions above
		Registry:   a.registry,
		CSI:        a.csi,
		Catalog:    a.catalog,
		Volumes:    a.volumes,
		Controller: a.controllerAPI(),
		OnMount:    a.metrics.observeMount,
		Health:     a.health,
		Metrics:    a.metrics.handler(a),
		Logger:     a.log.Named("api"),
		Limits:     a.cfg.BodyLimits,

		DockerVolumes: a.dockerVolumes,
		DockerPlugins: a.docker,
		Discovery:     a,
		VolumeEvents:  a.volumes,
	}
	if s := a.fleetStore(); s != nil {
		apiServer.Fleet = fleetNodes{s}
		apiServer.FleetPlugins = s
	}
	limits := a.cfg.HTTPLimits
	listeners := a.listeners
	a.listeners = nil // the servers close them
	errorLog := a.log.Named("http").StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug})
	for _, s := range listeners {
		// No ReadTimeout: in net/http it also ends, by cancelling its
		// context, a request whose body has arrived, so a mount waiting on
		// its plugin would answer 500 when it ran out. The gate's Handler
		// bounds the body by limits.ReadTimeout instead, and clears the
		// read deadline once the body is in.
		srv := &http.Server{
			Handler:           s.gate.Handler(s.policy.Authenticated, apiServer.HandlerFor(s.policy)),
			ReadHeaderTimeout: limits.ReadHeaderTimeout,
			WriteTimeout:      limits.WriteTimeout,
			IdleTimeout:       limits.IdleTimeout,
			MaxHeaderBytes:    limits.MaxHeaderBytes,
			ErrorLog:          errorLog,
			BaseContext:       func(net.Listener) context.Context { return ctx },
			ConnContext:       s.connContext,
			ConnState:         s.gate.ConnState,
		}
		a.servers = append(a.servers, srv)
		go func() {
			if err := srv.Serve(s.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
				a.log.Error("API server stopped", "listener", s.policy.Name, "error", err)
			}
		}()
	}
}

// listen opens the API's listeners, each behind a gate (the HTTP limits'
// connection caps).
func (a *Agent) listen() ([]served, error) {
	socket := a.SocketPath()
	if err := registry.ValidateSocketPath(socket); err != nil {
		return nil, fmt.Errorf("API socket: %w; use a shorter data dir", err)
	}
	// The state file's lock proves no other agent owns this dir: a socket
	// file left here is stale.
	_ = os.Remove(socket)
	unixListener, err := listenUnix(socket)
	if err != nil {
		return nil, fmt.Errorf("API socket: %w", err)
	}
	// The socket's mode (0600) admits only the agent's user: no token.
	// PeerListener names each caller by its uid in logs and events.
	policy := api.Listener{Name: "unix socket " + socket, Hosts: unixHosts}
	g := httpgate.New(api.PeerListener(unixListener), a.cfg.HTTPLimits.gateConfig(false))
	out := []served{{listener: g, policy: policy, gate: g, maxStreams: a.cfg.HTTPLimits.MaxStreams}}
	if a.cfg.HTTPAddr == "" {
		return out, nil
	}
	tcp, err := a.listenTCP()
	if err != nil {
		_ = g.Close()
		return nil, err
	}
	return append(out, tcp), nil
}

// unixHosts are the Host header values that name the API's unix socket.
// The CLI sends the first; curl --unix-socket sends "localhost".
var unixHosts = []string{"plugvisor", "localhost"}

// umaskMu serializes the umask changes of listenUnix: the umask is the
// process's.
var umaskMu sync.Mutex

// listenUnix creates the unix socket at path under umask 0177, so that it
// has mode 0600 from the moment it exists: there is no window in which
// another user could connect. Files that other goroutines create in that
// instant get a stricter mode than they asked for, never a looser one.
func listenUnix(path string) (net.Listener, error) {
	umaskMu.Lock()
	defer umaskMu.Unlock()
	old := syscall.Umask(0o177)
	defer syscall.Umask(old)
	return net.Listen("unix", path)
}
