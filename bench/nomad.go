// Package bench runs plugvisor's registry workloads (registry/workload)
// against Nomad's client/dynamicplugins registry and against plugvisor's
// registry in the same process, so that their figures can be compared
// within one run on one machine. It is a module of its own so that the main
// module never depends on Nomad. `make bench-compare` runs it and writes
// the table into BENCHMARKS.md.
package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/nomad/client/dynamicplugins"

	"github.com/plugvisor/plugvisor/registry/workload"
)

// NomadTarget adapts Nomad's dynamicplugins.Registry (v1.11.3) to
// workload.Target. Subscribers use PluginsUpdatedCh, as Nomad's CSI manager
// does: each gets a goroutine that drains its channel. A stuck subscriber
// is a channel that nobody reads.
type NomadTarget struct {
	r dynamicplugins.Registry

	mu      sync.Mutex
	drained []chan struct{} // closed when a subscriber's goroutine has returned
}

var _ workload.Target = (*NomadTarget)(nil)

// NewNomad starts a Nomad registry persisting through state (nil keeps it
// in memory only, as Nomad's tests do) with a no-op dispenser for
// workload.PluginType.
func NewNomad(state dynamicplugins.StateStorage) *NomadTarget {
	return &NomadTarget{r: dynamicplugins.NewRegistry(state, map[string]dynamicplugins.PluginDispenser{
		workload.PluginType: func(*dynamicplugins.PluginInfo) (any, error) { return nil, nil },
	})}
}

// Registry returns the Nomad registry under the adapter.
func (n *NomadTarget) Registry() dynamicplugins.Registry { return n.r }

// Register adds allocation allocID of plugin name.
func (n *NomadTarget) Register(name, allocID string) error {
	return n.r.RegisterPlugin(&dynamicplugins.PluginInfo{
		Type: workload.PluginType, Name: name, AllocID: allocID,
		ConnectionInfo: &dynamicplugins.PluginConnectionInfo{SocketPath: workload.SocketPath(allocID)},
	})
}

// Deregister removes allocation allocID of plugin name.
func (n *NomadTarget) Deregister(name, allocID string) error {
	return n.r.DeregisterPlugin(workload.PluginType, name, allocID)
}

// List returns how many plugins of workload.PluginType are current.
func (n *NomadTarget) List() int { return len(n.r.ListPlugins(workload.PluginType)) }

// Dispense looks up the current allocation of name.
func (n *NomadTarget) Dispense(name string) error {
	_, err := n.r.DispensePlugin(workload.PluginType, name)
	return err
}

// Subscribe starts a goroutine draining a PluginsUpdatedCh channel and
// calling got for each event. stop cancels the subscription; the goroutine
// returns once Nomad closes the channel.
func (n *NomadTarget) Subscribe(got func()) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := n.r.PluginsUpdatedCh(ctx, workload.PluginType)
	done := n.track()
	go func() {
		defer close(done)
		for range ch {
			got()
		}
	}()
	return cancel
}

// SubscribeStuck subscribes without ever reading the channel. release
// starts draining it and cancels the subscription, which lets a stalled
// Nomad registry go on.
func (n *NomadTarget) SubscribeStuck() (release func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := n.r.PluginsUpdatedCh(ctx, workload.PluginType)
	done := n.track()
	return func() {
		go func() {
			defer close(done)
			for range ch {
			}
		}()
		cancel()
	}
}

func (n *NomadTarget) track() chan struct{} {
	done := make(chan struct{})
	n.mu.Lock()
	n.drained = append(n.drained, done)
	n.mu.Unlock()
	return done
}

// Close shuts the registry down and waits for the subscribers' goroutines,
// at most timeout in all. Nomad's Shutdown blocks forever while its
// broadcaster is stuck sending to a subscriber: then Close abandons the
// goroutines still blocked and says so, rather than hanging the benchmark.
func (n *NomadTarget) Close(timeout time.Duration) error {
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		n.r.Shutdown()
		n.mu.Lock()
		drained := n.drained
		n.mu.Unlock()
		for _, done := range drained {
			<-done
		}
	}()
	select {
	case <-finished:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("bench: Nomad's registry did not shut down within %v: its goroutines are abandoned", timeout)
	}
}
