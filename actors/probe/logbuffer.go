package probe

import (
	"context"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"
)

// LogBuffer is an io.Writer that many goroutines may write to while a test
// reads what they wrote: the log sink of a test that asserts on log lines
// (hclog.LoggerOptions.Output, a subprocess's stderr). The zero value is
// ready to use.
type LogBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

// Write appends p.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// RunUntilLogged runs a command's run function (a plugin's Run: until ctx
// is done, logging to stderr) until what it logged contains want, then
// stops it and returns its log. It fails t when the command ends with an
// error, or has not logged want within a minute.
func RunUntilLogged(t TB, run func(ctx context.Context, stderr io.Writer) error, want string) string {
	t.Helper()
	var logs LogBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, &logs) }()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(logs.String(), want) {
		select {
		case err := <-done:
			cancel()
			t.Fatalf("the command ended before it logged %q: %v\n%s", want, err, logs.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("the command did not log %q within a minute:\n%s", want, logs.String())
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("the command ended with %v:\n%s", err, logs.String())
	}
	return logs.String()
}

// RequireAgentLogFormat runs a plugin's command as RunUntilLogged does,
// until it logs want, in a fresh temporary directory whose path is short
// enough for a unix socket in it, and fails t unless the command logged a
// line in the agent's hclog format (2026-11-26T01:27:57.293Z [INFO]  NAME:
// MESSAGE), not slog's text format (level=INFO). line is a regular
// expression of what follows [INFO] on that line.
func RequireAgentLogFormat(t TB, run func(ctx context.Context, dir string, stderr io.Writer) error, want, line string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "pv")
	if err != nil {
		t.Fatalf("a temporary directory: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	logs := RunUntilLogged(t, func(ctx context.Context, stderr io.Writer) error { return run(ctx, dir, stderr) }, want)
	if !regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT[\d:.]+Z? \[INFO\]  ` + line).MatchString(logs) {
		t.Fatalf("no line in the agent's format ([INFO]  %s):\n%s", line, logs)
	}
	if strings.Contains(logs, "level=INFO") {
		t.Fatalf("a line in slog's text format, not the agent's format:\n%s", logs)
	}
}
