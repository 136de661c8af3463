package registry_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
)

// Example_open is the README's "Use it as a library" program: one call
// opens the state file, an actor system and the registry, and one closes
// them. README.md shows this file as a program (package main, func main);
// TestTheReadmeExampleIsExampleOpen keeps the two the same.
func Example_open() {
	dir, err := os.MkdirTemp("", "agent")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	reg, err := registry.Open(filepath.Join(dir, "state.db"), registry.OpenOptions{})
	if err != nil {
		panic(err)
	}
	defer reg.Close() // the registry, its actor system and the file's lock

	ctx := context.Background()
	sub, err := reg.Subscribe(ctx, "csi-node", registry.SubscribeOptions{}) // ends at Close
	if err != nil {
		panic(err) // refused: too many subscriptions, shut down, or a bad type
	}
	err = reg.RegisterPlugin(&messages.PluginInfo{
		Type: "csi-node", Name: "hostpath", AllocId: "a1",
		Connection: &messages.ConnectionInfo{SocketPath: "/run/plugins/a1/csi.sock"},
	})
	if err != nil {
		panic(err)
	}
	ev := (<-sub.C).(*messages.PluginRegistered)
	fmt.Println("registered", ev.GetPlugin().GetName(), ev.GetPlugin().GetAllocId())
	current, err := reg.WaitForPlugin(ctx, "csi-node", "hostpath")
	fmt.Println(current.GetConnection().GetSocketPath(), err)
	// Output:
	// registered hostpath a1
	// /run/plugins/a1/csi.sock <nil>
}
