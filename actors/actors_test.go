package actors_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/messages"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func jsonLogger(out *probe.LogBuffer, level hclog.Level) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Output: out, Level: level, JSONFormat: true})
}

func TestSlogHandlerKeepsLevelsAndPairs(t *testing.T) {
	out := &probe.LogBuffer{}
	logger := slog.New(actors.NewSlogHandler(jsonLogger(out, hclog.Info)))

	logger.Debug("hidden", "k", 1)
	logger.With("system", "s1").WithGroup("req").Warn("slow", "ms", 250, slog.Group("peer", "id", "p1"))

	got := out.String()
	require.NotContains(t, got, "hidden", "debug is below the logger's info level")
	require.Contains(t, got, `"@level":"warn"`)
	require.Contains(t, got, `"@message":"slow"`)
	require.Contains(t, got, `"system":"s1"`)
	require.Contains(t, got, `"req.ms":250`)
	require.Contains(t, got, `"req.peer.id":"p1"`)
}

func TestSlogHandlerLevels(t *testing.T) {
	cases := []struct {
		name  string
		level slog.Level
		want  string
	}{
		{"debug maps to debug", slog.LevelDebug, "debug"},
		{"info maps to info", slog.LevelInfo, "info"},
		{"warn maps to warn", slog.LevelWarn, "warn"},
		{"error maps to error", slog.LevelError, "error"},
		{"below debug maps to trace", slog.LevelDebug - 4, "trace"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := &probe.LogBuffer{}
			h := actors.NewSlogHandler(jsonLogger(out, hclog.Trace))
			require.True(t, h.Enabled(context.Background(), tc.level))
			slog.New(h).Log(context.Background(), tc.level, "m")
			require.Contains(t, out.String(), `"@level":"`+tc.want+`"`)
		})
	}
}

func TestNewSystemLogsThroughHclog(t *testing.T) {
	out := &probe.LogBuffer{}
	system := actors.NewSystem(jsonLogger(out, hclog.Debug))
	t.Cleanup(system.Shutdown)
	system.Logger().Info("hello from protoactor", "n", 7)
	require.Contains(t, out.String(), `"@module":"actor"`)
	require.Contains(t, out.String(), `"n":7`)
}

func TestPanicStackLogsTheStackAndStillFails(t *testing.T) {
	receive := func(ctx actor.Context) {
		if _, ok := ctx.Message().(*messages.PluginInfo); ok {
			panicOnPurpose()
		}
	}
	t.Run("PanicStack", func(t *testing.T) {
		testPanicLogged(t, func(logger hclog.Logger) *actor.Props {
			return actor.PropsFromFunc(receive, actor.WithReceiverMiddleware(actors.PanicStack(logger)))
		})
	})
	t.Run("LogPanic", func(t *testing.T) {
		testPanicLogged(t, func(logger hclog.Logger) *actor.Props {
			return actor.PropsFromFunc(func(ctx actor.Context) {
				defer actors.LogPanic(logger, ctx)
				receive(ctx)
			})
		})
	})
}

// testPanicLogged checks that an actor of props panicking on a message
// logs the panic's stack and still stops.
func testPanicLogged(t *testing.T, props func(hclog.Logger) *actor.Props) {
	out := &probe.LogBuffer{}
	logger := jsonLogger(out, hclog.Error)
	system := probe.NewSystem(t)
	p := probe.New(t, system)

	childProps := props(logger).Configure(
		actor.WithSupervisor(actor.NewOneForOneStrategy(0, time.Second, func(any) actor.Directive {
			return actor.StopDirective
		})))
	parent := system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if _, ok := ctx.Message().(*actor.Started); ok {
			pid := ctx.Spawn(childProps)
			ctx.Send(p.PID(), pid)
			ctx.Send(pid, &messages.PluginInfo{Name: "boom"})
		}
	}, actor.WithSupervisor(actor.NewOneForOneStrategy(0, time.Second, func(any) actor.Directive {
		return actor.StopDirective
	}))))
	t.Cleanup(func() { system.Root.Stop(parent) })

	child := probe.Expect[*actor.PID](t, p, time.Second)
	p.Watch(t, child)
	p.ExpectTerminated(t, child, 2*time.Second)
	got := out.String()
	require.Contains(t, got, "actor panicked")
	require.Contains(t, got, "on purpose")
	require.Contains(t, got, "panicOnPurpose", "the stack names the function that panicked")
	require.Contains(t, got, "*messages.PluginInfo")
}

func panicOnPurpose() { panic("on purpose") }
