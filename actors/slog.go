package actors

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"
)

// SlogHandler is a log/slog Handler that writes through an hclog.Logger,
// keeping levels and key/value pairs. protoactor logs through slog; this is
// how its lines reach the agent's hclog output.
type SlogHandler struct {
	logger hclog.Logger
	group  string
}

// NewSlogHandler returns a slog Handler writing to logger.
func NewSlogHandler(logger hclog.Logger) *SlogHandler {
	return &SlogHandler{logger: logger}
}

// Enabled reports whether logger writes records of level l.
func (h *SlogHandler) Enabled(_ context.Context, l slog.Level) bool {
	return toHclogLevel(l) >= h.logger.GetLevel()
}

// Handle writes one record with its attributes as hclog key/value pairs.
func (h *SlogHandler) Handle(_ context.Context, r slog.Record) error {
	args := make([]any, 0, 2*r.NumAttrs())
	r.Attrs(func(a slog.Attr) bool {
		args = appendAttr(args, h.group, a)
		return true
	})
	h.logger.Log(toHclogLevel(r.Level), r.Message, args...)
	return nil
}

// WithAttrs returns a handler whose records carry attrs.
func (h *SlogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	args := make([]any, 0, 2*len(attrs))
	for _, a := range attrs {
		args = appendAttr(args, h.group, a)
	}
	return &SlogHandler{logger: h.logger.With(args...), group: h.group}
}

// WithGroup returns a handler that prefixes later keys with name and a dot.
func (h *SlogHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &SlogHandler{logger: h.logger, group: joinKey(h.group, name)}
}

func appendAttr(args []any, group string, a slog.Attr) []any {
	v := a.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		prefix := joinKey(group, a.Key)
		for _, inner := range v.Group() {
			args = appendAttr(args, prefix, inner)
		}
		return args
	}
	if a.Key == "" {
		return args
	}
	return append(args, joinKey(group, a.Key), redact(v.Any()))
}

// redact logs a protobuf message (other than a PID) by its type only.
// protoactor logs whole messages (dead letters, supervision), and the
// messages that cross actor boundaries can carry CSI secrets, which must
// never reach a log.
func redact(v any) any {
	switch m := v.(type) {
	case *actor.PID:
		return m
	case proto.Message:
		return fmt.Sprintf("%T (contents not logged)", m)
	}
	return v
}

func joinKey(group, key string) string {
	if group == "" {
		return key
	}
	if key == "" {
		return group
	}
	return strings.Join([]string{group, key}, ".")
}

func toHclogLevel(l slog.Level) hclog.Level {
	switch {
	case l < slog.LevelDebug:
		return hclog.Trace
	case l < slog.LevelInfo:
		return hclog.Debug
	case l < slog.LevelWarn:
		return hclog.Info
	case l < slog.LevelError:
		return hclog.Warn
	default:
		return hclog.Error
	}
}
