// Package startlog holds a program's log lines back while it starts, so
// that a start that fails prints its error alone: New wraps a logger;
// Succeeded writes what was held and lets every later line through,
// Failed drops it all.
package startlog

import (
	"sync"

	"github.com/hashicorp/go-hclog"
)

// Logger is the logger a program's parts get while it starts. It holds
// their lines back until the start is decided: a start that succeeds
// writes them all, in order, to the agent's logger, and from then on every
// line goes straight through; a start that fails drops them, since its
// error says what went wrong, and drops every line its stopped parts write
// later. So a failed start prints one line, its error, and no start-up and
// teardown before it.
//
// The standard loggers it makes (StandardLogger, StandardWriter) write
// straight through: only the API's HTTP servers use one, once serving.
type Logger struct {
	hclog.Logger // the logger a line goes to; With and Named derive from it
	held         *heldLines
}

// heldLines are the lines of one start, shared by every logger derived
// from its Logger.
type heldLines struct {
	mu    sync.Mutex
	state heldState
	lines []heldLine
}

type heldState int

const (
	holding heldState = iota
	passing
	dropping
)

// heldLine is one line held back, with the logger it goes to.
type heldLine struct {
	to    hclog.Logger
	level hclog.Level
	msg   string
	args  []any
}

// New is a Logger that holds back the lines for to.
func New(to hclog.Logger) *Logger {
	return &Logger{Logger: to, held: &heldLines{}}
}

// Succeeded writes the held lines and lets every later one through.
func (l *Logger) Succeeded() {
	h := l.held
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, line := range h.lines {
		line.to.Log(line.level, line.msg, line.args...)
	}
	h.lines, h.state = nil, passing
}

// Failed drops the held lines and every later one.
func (l *Logger) Failed() {
	h := l.held
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines, h.state = nil, dropping
}

// Log implements hclog.Logger.
func (l *Logger) Log(level hclog.Level, msg string, args ...any) {
	h := l.held
	h.mu.Lock()
	switch h.state {
	case holding:
		h.lines = append(h.lines, heldLine{to: l.Logger, level: level, msg: msg, args: args})
		h.mu.Unlock()
	case passing:
		h.mu.Unlock()
		l.Logger.Log(level, msg, args...)
	default:
		h.mu.Unlock()
	}
}

// Trace implements hclog.Logger.
func (l *Logger) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }

// Debug implements hclog.Logger.
func (l *Logger) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }

// Info implements hclog.Logger.
func (l *Logger) Info(msg string, args ...any) { l.Log(hclog.Info, msg, args...) }

// Warn implements hclog.Logger.
func (l *Logger) Warn(msg string, args ...any) { l.Log(hclog.Warn, msg, args...) }

// Error implements hclog.Logger.
func (l *Logger) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

// With implements hclog.Logger.
func (l *Logger) With(args ...any) hclog.Logger {
	return &Logger{Logger: l.Logger.With(args...), held: l.held}
}

// Named implements hclog.Logger.
func (l *Logger) Named(name string) hclog.Logger {
	return &Logger{Logger: l.Logger.Named(name), held: l.held}
}

// ResetNamed implements hclog.Logger.
func (l *Logger) ResetNamed(name string) hclog.Logger {
	return &Logger{Logger: l.Logger.ResetNamed(name), held: l.held}
}
