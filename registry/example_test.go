package registry_test

import (
	"context"
	"fmt"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
)

// Example embeds a registry in a program that is not an actor: register,
// list, dispense, and follow events on a channel. An agent opens a
// storage.Bolt file instead of the in-memory store.
func Example() {
	system := actors.NewSystem(nil)
	defer system.Shutdown()
	store := storage.NewMemory()
	bucket, _ := store.Bucket(registry.BucketName)

	reg, err := registry.New(system, registry.Config{
		Bucket: bucket,
		Dispensers: map[string]registry.Dispenser{
			"csi-node": func(p *messages.PluginInfo) (any, error) { return p.GetConnection().GetSocketPath(), nil },
		},
	})
	if err != nil {
		panic(err)
	}
	defer reg.Shutdown()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := reg.PluginsUpdatedCh(ctx, "csi-node")

	for _, alloc := range []string{"a1", "a2"} {
		err := reg.RegisterPlugin(&messages.PluginInfo{
			Type: "csi-node", Name: "hostpath", AllocId: alloc,
			Connection: &messages.ConnectionInfo{SocketPath: "/run/plugvisor/" + alloc + "/csi.sock"},
		})
		if err != nil {
			panic(err)
		}
	}
	for range 2 {
		ev := (<-events).(*messages.PluginRegistered)
		fmt.Printf("registered %s/%s (replaces %q)\n", ev.GetPlugin().GetName(), ev.GetPlugin().GetAllocId(), ev.GetPrevious().GetAllocId())
	}

	socket, _ := reg.DispensePlugin("csi-node", "hostpath")
	fmt.Println("current:", socket)
	fmt.Println("plugins:", len(reg.ListPlugins("csi-node")))
	err = reg.RegisterPlugin(&messages.PluginInfo{Type: "csi-node", Name: "../etc"})
	fmt.Println(err != nil)
	// Output:
	// registered hostpath/a1 (replaces "")
	// registered hostpath/a2 (replaces "a1")
	// current: /run/plugvisor/a2/csi.sock
	// plugins: 1
	// true
}
