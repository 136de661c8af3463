// Command device-agent is the shipped plugvisor agent with one more plugin
// type, deviceplugin's "device-plugin", added through
// agent.Config.PluginTypes. It runs until SIGINT or SIGTERM. With -fake it
// also serves a fake device plugin and registers it, to watch:
//
//	go run ./cmd/device-agent -data-dir /tmp/dev -fake
//	curl --unix-socket /tmp/dev/plugvisor.sock http://plugvisor/v1/health
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/examples/deviceplugin"
	"github.com/plugvisor/plugvisor/messages"
)

func main() {
	dataDir := flag.String("data-dir", agent.DefaultDataDir(), "the agent's data dir")
	fake := flag.Bool("fake", false, "serve a fake device plugin, gpu, and register it")
	flag.Parse()
	if err := run(*dataDir, *fake); err != nil {
		fmt.Fprintln(os.Stderr, "device-agent:", err)
		os.Exit(1)
	}
}

func run(dataDir string, fake bool) error {
	socket := filepath.Join(dataDir, "gpu.sock")
	if fake { // served first, stopped last: the agent stops its instance before
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return err
		}
		_ = os.Remove(socket)
		p, err := deviceplugin.Serve(socket, "gpu0", "gpu1")
		if err != nil {
			return err
		}
		defer p.Close()
	}
	a, err := agent.Start(agent.Config{DataDir: dataDir, Logger: hclog.Default(),
		PluginTypes: []agent.PluginType{{Name: deviceplugin.Type, Manager: deviceplugin.New(deviceplugin.Config{})}}})
	if err != nil {
		return err
	}
	defer a.Shutdown(context.Background())
	if fake {
		if err := a.Registry().RegisterPlugin(&messages.PluginInfo{Type: deviceplugin.Type, Name: "gpu", AllocId: "local",
			Connection: &messages.ConnectionInfo{SocketPath: socket}}); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return nil
}
