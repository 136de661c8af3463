package api

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/dockervolume"
	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/messages"
)

// This file holds the force rule of the plugin routes: neither a
// registration nor a deregistration through the API replaces a healthy
// current allocation without force. A deregistration alone would do it in
// two steps: remove the healthy allocation, then register another one,
// which then replaces nothing.

// errTakeover refuses a registration that would replace a healthy
// current allocation without force.
var errTakeover = errclass.New(errclass.Conflict, "not registered")

// checkTakeover refuses info when previous, the plugin's current
// allocation, is another one that the agent found healthy, unless force:
// the new allocation would become current whether or not anything serves
// its socket, and would receive the secrets and data of every volume of
// the plugin. The CLI's -force sends force. The check and the
// registration are two steps: two registrations racing may both pass it,
// which the plugins right, needed for either, makes an operator's race.
// The Go facade (registry.RegisterPlugin) does not check: its callers
// (discovery, embedders) decide for themselves.
func (s *Server) checkTakeover(info, previous *messages.PluginInfo, force bool) error {
	if force || previous == nil || previous.GetAllocId() == info.GetAllocId() || !s.healthy(previous) {
		return nil
	}
	return fmt.Errorf("%w: %s %s is served by healthy allocation %s (%s); %s would replace it as current.\n"+
		"Its socket would receive the volumes of the plugin, secrets included: deregister %s first, "+
		"or send \"force\": true (plugvisor plugin register -force)", errTakeover, info.GetType(), info.GetName(),
		previous.GetAllocId(), addressOf(previous.GetConnection()),
		info.GetAllocId(), previous.GetAllocId())
}

// healthy says whether the agent found p healthy at its last check; false
// for a type whose health it does not check, or before the first check.
func (s *Server) healthy(p *messages.PluginInfo) bool {
	same := func(ptype, name, alloc string, healthy bool) bool {
		return healthy && (ptype == "" || ptype == p.GetType()) && name == p.GetName() && alloc == p.GetAllocId()
	}
	switch p.GetType() {
	case csi.TypeNode, csi.TypeController:
		if s.CSI != nil {
			for _, f := range s.CSI.Plugins() {
				if same(f.GetType(), f.GetName(), f.GetAllocId(), f.GetHealthy()) {
					return true
				}
			}
		}
	case dockervolume.PluginType:
		if s.DockerPlugins != nil {
			for _, h := range s.DockerPlugins.Plugins() {
				if same("", h.GetName(), h.GetAllocId(), h.GetHealthy()) {
					return true
				}
			}
		}
	}
	return false
}

// errStillServing refuses a deregistration of a healthy current
// allocation that still serves, without force.
var errStillServing = errclass.New(errclass.Conflict, "not deregistered")

// goneWithin bounds the dial that tells whether an allocation's plugin
// process is gone.
const goneWithin = time.Second

// checkDeregistration refuses to deregister alloc of plugin (ptype, name)
// when it is the plugin's current allocation, the agent found it healthy,
// and its process is not known to be gone (see gone), unless force.
// Every other deregistration stays free: an allocation that is not
// current, or not healthy, or whose process is gone (as an orchestrator
// deregisters a plugin it stopped), and an unknown one (404 from the
// registry). Discovery's removals do not pass here: they are the registry
// facade's. As with checkTakeover, the check and the deregistration are
// two steps, which the plugins right, needed for either, makes an
// operator's race.
func (s *Server) checkDeregistration(ctx context.Context, ptype, name, alloc string, force bool) error {
	current, ok := s.Registry.Snapshot().Current(ptype, name)
	if force || !ok || current.GetAllocId() != alloc || !s.healthy(current) || gone(ctx, current.GetConnection()) {
		return nil
	}
	return fmt.Errorf("%w: %s %s: allocation %s is its healthy current allocation, and its plugin still serves %s.\n"+
		"Without it, the next registration would become current without force, and receive the volumes of the plugin, secrets included: "+
		"stop the plugin first, or send force=true (plugvisor plugin deregister -force)", errStillServing, ptype, name, alloc,
		addressOf(current.GetConnection()))
}

// addressOf is the socket path or address of c, as errors name it.
func addressOf(c *messages.ConnectionInfo) string {
	return c.GetSocketPath() + c.GetAddress()
}

// gone says whether the plugin process behind c is gone: its socket file
// is missing, or nothing listens on its socket or TCP address. A dial that
// times out or fails otherwise proves nothing, nor does an address of
// another scheme: the process may be there, so force stays needed.
func gone(ctx context.Context, c *messages.ConnectionInfo) bool {
	network, address := "unix", c.GetSocketPath()
	if address == "" {
		scheme, rest, ok := strings.Cut(c.GetAddress(), "://")
		switch {
		case ok && scheme == "unix":
			address = rest
		case ok && scheme == "tcp":
			network, address = "tcp", rest
		default:
			return false
		}
	}
	ctx, cancel := context.WithTimeout(ctx, goneWithin)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, network, address)
	if err == nil {
		_ = conn.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT)
}
