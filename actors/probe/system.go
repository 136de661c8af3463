package probe

import (
	"io"
	"os"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"

	"github.com/plugvisor/plugvisor/actors"
)

// LogLevelEnv names the environment variable that sets the level of the
// logs that NewSystem and Logger send to the test log ("off" by default):
// PLUGVISOR_TEST_LOG=debug go test ./registry/
const LogLevelEnv = "PLUGVISOR_TEST_LOG"

// logTB is what Logger needs of a test.
type logTB interface {
	TB
	Logf(format string, args ...any)
}

// NewSystem returns an actor system for one test, logging to the test log,
// and shuts it down when the test ends. Register it before anything that
// spawns actors in it, so that their cleanups run first.
//
// Its dead-letter throttle window is short (protoactor keeps a goroutine
// alive for one window after each dead letter), so goleak finds nothing
// left running soon after the test.
func NewSystem(t logTB, opts ...actor.ConfigOption) *actor.ActorSystem {
	t.Helper()
	all := append([]actor.ConfigOption{actor.WithDeadLetterThrottleInterval(20 * time.Millisecond)}, opts...)
	system := actors.NewSystem(Logger(t), all...)
	t.Cleanup(system.Shutdown)
	return system
}

// Logger returns an hclog logger writing to the test log at the level of
// PLUGVISOR_TEST_LOG. Lines logged after the test ended are dropped rather
// than reaching a finished test.
func Logger(t logTB) hclog.Logger {
	level := hclog.LevelFromString(os.Getenv(LogLevelEnv))
	if level == hclog.NoLevel {
		level = hclog.Off
	}
	w := &testWriter{t: t}
	t.Cleanup(w.close)
	return hclog.New(&hclog.LoggerOptions{Name: "test", Level: level, Output: w})
}

type testWriter struct {
	mu     sync.Mutex
	t      logTB
	closed bool
}

var _ io.Writer = (*testWriter)(nil)

func (w *testWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.t.Logf("%s", b)
	}
	return len(b), nil
}

func (w *testWriter) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}
