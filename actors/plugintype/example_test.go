package plugintype_test

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/plugvisor/plugvisor/actors/plugintype"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/supervisor"
)

// deviceManager is a whole plugin type, "device", defined outside
// plugvisor: its instances are plain actors, and what it says goes to a Go
// channel. A real type would check the plugin's health in its instances.
type deviceManager struct {
	instances *plugintype.Instances
	said      chan<- string
}

func (m *deviceManager) Receive(ctx actor.Context) { m.instances.Receive(ctx) }

func (m *deviceManager) InstanceProps(_ actor.Context, p *messages.PluginInfo) (*actor.Props, error) {
	said := m.said
	return actor.PropsFromFunc(func(ctx actor.Context) {
		if _, ok := ctx.Message().(*actor.Started); ok {
			said <- fmt.Sprintf("serving %s from %s", p.GetName(), p.GetAllocId())
		}
	}), nil
}

func (m *deviceManager) InstanceStopped(_ actor.Context, p *messages.PluginInfo, _ *actor.PID, why string) {
	m.said <- fmt.Sprintf("stopped %s: %s", p.GetAllocId(), why)
}

func (m *deviceManager) InstanceFailed(_ actor.Context, p *messages.PluginInfo, _ *actor.PID, reason string) {
	m.said <- fmt.Sprintf("failed %s: %s", p.GetAllocId(), reason)
}

func (m *deviceManager) InstanceGone(actor.Context, *messages.PluginInfo, *actor.PID) {}

// Example runs the "device" plugin type on a registry: one supervised
// instance per plugin, replaced when a newer allocation registers.
func Example() {
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	reg, err := registry.Open(filepath.Join(dir, "state.db"), registry.OpenOptions{})
	if err != nil {
		panic(err)
	}
	defer reg.Close()

	strategy, err := supervisor.NewStrategy(supervisor.Spec{MaxRestarts: 3, Within: time.Minute, InitialDelay: 100 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	cfg := plugintype.Config{Types: []string{"device"}, Registry: reg.PID(),
		Snapshot: func() plugintype.Snapshot { return reg.Snapshot() }}
	said := make(chan string, 16)
	manager := reg.System().Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		m := &deviceManager{said: said}
		m.instances = plugintype.New(cfg, m)
		return m
	}, actor.WithSupervisor(strategy)))
	defer func() { _ = reg.System().Root.StopFuture(manager).Wait() }() // before reg.Close

	for _, alloc := range []string{"a1", "a2"} {
		err := reg.RegisterPlugin(&messages.PluginInfo{Type: "device", Name: "gpu", AllocId: alloc,
			Connection: &messages.ConnectionInfo{SocketPath: "/run/plugins/" + alloc + "/gpu.sock"}})
		if err != nil {
			panic(err)
		}
		if alloc == "a2" {
			fmt.Println(<-said)
		}
		fmt.Println(<-said)
	}
	// Output:
	// serving gpu from a1
	// stopped a1: registered
	// serving gpu from a2
}
