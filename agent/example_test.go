package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/messages"
)

// Example runs the whole agent in a program's own process: its parts are
// there to use, and Shutdown stops them in order and closes the state
// file. A plugin whose socket appears in a.PluginDir() is found by
// discovery; this one is registered by hand.
func Example() {
	dir, err := os.MkdirTemp("", "pv") // short: the API socket's path must fit in 107 bytes
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	a, err := agent.Start(agent.Config{DataDir: dir, NodeID: "node-1"})
	if err != nil {
		panic(err)
	}
	defer func() {
		if err := a.Shutdown(context.Background()); err != nil {
			panic(err)
		}
	}()
	fmt.Println("API at", filepath.Base(a.SocketPath()))

	err = a.Registry().RegisterPlugin(&messages.PluginInfo{Type: "device", Name: "gpu", AllocId: "a1",
		Connection: &messages.ConnectionInfo{SocketPath: filepath.Join(a.PluginDir(), "gpu.sock")}})
	if err != nil {
		panic(err)
	}
	for _, p := range a.Registry().ListPlugins("device") {
		fmt.Println(p.GetType(), p.GetName(), p.GetAllocId())
	}
	// Output:
	// API at plugvisor.sock
	// device gpu a1
}
