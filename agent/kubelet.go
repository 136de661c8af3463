package agent

import (
	"context"
	"slices"

	"github.com/plugvisor/plugvisor/kubeletreg"
	"github.com/plugvisor/plugvisor/messages"
)

// startKubeletRegistration watches the registration directories, when
// there are any, and registers what their sockets ask for.
func (a *Agent) startKubeletRegistration() error {
	if len(a.cfg.RegistrationDirs) == 0 {
		return nil
	}
	w, err := kubeletreg.Start(a.system, kubeletreg.Config{
		Dirs:     a.cfg.RegistrationDirs,
		Registry: a.registry,
		Logger:   a.log,
		Metrics:  a.metrics,
	})
	if err != nil {
		return err
	}
	a.kubelet = w
	a.stops = append(a.stops, func(context.Context) error { return w.Shutdown() })
	return nil
}

// found returns what discovery and the kubelet registration watcher know
// of every plugin they found.
func (a *Agent) found() []*messages.DiscoveredPlugin {
	found := a.disc.Plugins()
	if a.kubelet != nil {
		found = append(slices.Clip(found), a.kubelet.Plugins()...)
	}
	return found
}
