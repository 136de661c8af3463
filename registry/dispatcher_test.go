package registry_test

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/registry"
)

// The registry actor runs on a goroutine of its own, which must end with
// the actor however it stops (TestMain's goleak checks the Shutdown path
// for every test).
func TestTheRegistryGoroutineEndsWhenItsActorIsStopped(t *testing.T) {
	system := probe.NewSystem(t)
	r, err := registry.New(system, registry.Config{Bucket: memoryBucket(t), Name: "stopped-directly"})
	require.NoError(t, err)
	require.NoError(t, r.RegisterPlugin(plugin(0)))
	require.True(t, registryGoroutineRuns(), "the registry actor has its goroutine")

	require.NoError(t, system.Root.StopFuture(r.PID()).Wait())
	require.Eventually(t, func() bool { return !registryGoroutineRuns() }, timeout, time.Millisecond)
	require.ErrorIs(t, r.RegisterPlugin(plugin(1)), registry.ErrShutdown, "writes to a stopped actor fail, they do not hang")
	_ = r.Shutdown() // the actor is gone already
}

func registryGoroutineRuns() bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "registry.(*ownGoroutine).run")
}
