package probe_test

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/messages"
)

// exampleT stands in for *testing.T so the example can run on its own;
// in a test, pass t.
type exampleT struct{ cleanups []func() }

func (e *exampleT) Helper()                           {}
func (e *exampleT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (e *exampleT) Cleanup(f func())                  { e.cleanups = append(e.cleanups, f) }
func (e *exampleT) done() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
}

// Example tests an actor that echoes PluginInfo: the probe asks it and
// checks the reply, then watches it stop.
func Example() {
	t := &exampleT{}
	defer t.done()
	system := actors.NewSystem(nil)
	defer system.Shutdown()

	echo := system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if msg, ok := ctx.Message().(*messages.PluginInfo); ok {
			ctx.Respond(msg)
		}
	}))

	p := probe.New(t, system)
	reply := probe.Ask[*messages.PluginInfo](t, p, echo, &messages.PluginInfo{Name: "hostpath"}, time.Second)
	fmt.Println("echoed", reply.GetName())

	p.Watch(t, echo)
	system.Root.Stop(echo)
	p.ExpectTerminated(t, echo, time.Second)
	fmt.Println("echo stopped")
	// Output:
	// echoed hostpath
	// echo stopped
}
